package main

// The "vectors" mode: test vectors for crates/api/src/gojson and crates/api/src/worker_hash,
// computed by Go itself. Input lines on stdin:
//   q <quantity>              -> <quantity> TAB <json.Marshal of resource.Quantity>
//   t <key> <podTemplate JSON> -> <key> TAB <sha256 of json.Marshal of corev1.PodTemplateSpec>
//   g <key> <graph JSON>       -> <key> TAB <worker hash of the v1beta1 graph>
// The graph types below declare only what the worker hash reads, with the field order, JSON
// names and options of upstream's v1beta1 API (release 1.5.0 field set).

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

type graph struct {
	Spec struct {
		Components       []component     `json:"components,omitempty"`
		Env              []corev1.EnvVar `json:"env,omitempty"`
		BackendFramework string          `json:"backendFramework,omitempty"`
	} `json:"spec"`
}

type component struct {
	Name string `json:"name"`
	Type string `json:"type,omitempty"`
	worker
}

type worker struct {
	GlobalDynamoNamespace bool                    `json:"globalDynamoNamespace,omitempty"`
	PodTemplate           *corev1.PodTemplateSpec `json:"podTemplate,omitempty"`
	Multinode             *struct {
		NodeCount int32 `json:"nodeCount"`
	} `json:"multinode,omitempty"`
	SharedMemorySize *resource.Quantity `json:"sharedMemorySize,omitempty"`
	FrontendSidecar  *string            `json:"frontendSidecar,omitempty"`
	CompilationCache *struct {
		PVCName   string `json:"pvcName"`
		MountPath string `json:"mountPath,omitempty"`
	} `json:"compilationCache,omitempty"`
	Experimental *experimental `json:"experimental,omitempty"`
}

type experimental struct {
	GPUMemoryService *struct {
		Mode                  string   `json:"mode,omitempty"`
		DeviceClassName       string   `json:"deviceClassName,omitempty"`
		ExtraClientContainers []string `json:"extraClientContainers,omitempty"`
		ExtraClientPods       []struct {
			Name        string                 `json:"name"`
			PodTemplate corev1.PodTemplateSpec `json:"podTemplate"`
		} `json:"extraClientPods,omitempty"`
	} `json:"gpuMemoryService,omitempty"`
	Failover *struct {
		Mode       string `json:"mode,omitempty"`
		NumShadows int32  `json:"numShadows,omitempty"`
	} `json:"failover,omitempty"`
	Grove *struct {
		ForceScalingGroup *bool `json:"forceScalingGroup,omitempty"`
	} `json:"grove,omitempty"`
	Checkpoint *struct {
		Enabled             bool    `json:"enabled"`
		Mode                string  `json:"mode,omitempty"`
		StartupPolicy       string  `json:"startupPolicy,omitempty"`
		DeletionPolicy      string  `json:"deletionPolicy,omitempty"`
		CheckpointRef       *string `json:"checkpointRef,omitempty"`
		Identity            *struct {
			Model                string            `json:"model"`
			BackendFramework     string            `json:"backendFramework"`
			DynamoVersion        string            `json:"dynamoVersion,omitempty"`
			TensorParallelSize   int32             `json:"tensorParallelSize,omitempty"`
			PipelineParallelSize int32             `json:"pipelineParallelSize,omitempty"`
			Dtype                string            `json:"dtype,omitempty"`
			MaxModelLen          int32             `json:"maxModelLen,omitempty"`
			ExtraParameters      map[string]string `json:"extraParameters,omitempty"`
		} `json:"identity,omitempty"`
		TargetContainerName string `json:"targetContainerName,omitempty"`
		Job                 *struct {
			GMSClientContainers []string                `json:"gmsClientContainers,omitempty"`
			PodTemplate         *corev1.PodTemplateSpec `json:"podTemplate,omitempty"`
		} `json:"job,omitempty"`
	} `json:"checkpoint,omitempty"`
}

type hashInput struct {
	Version          string            `json:"version"`
	BackendFramework string            `json:"backendFramework,omitempty"`
	Env              []corev1.EnvVar   `json:"env,omitempty"`
	Workers          map[string]worker `json:"workers,omitempty"`
}

func workerHash(g *graph) string {
	in := hashInput{
		Version:          "dgd-worker-rollout-v2",
		BackendFramework: g.Spec.BackendFramework,
		Env:              g.Spec.Env,
		Workers:          map[string]worker{},
	}
	var names []string
	for _, c := range g.Spec.Components {
		switch c.Type {
		case "worker", "prefill", "decode":
			w := c.worker
			if w.PodTemplate != nil && reflect.DeepEqual(*w.PodTemplate, corev1.PodTemplateSpec{}) {
				w.PodTemplate = nil
			}
			in.Workers[c.Name] = w
			names = append(names, c.Name)
		}
	}
	sort.Strings(names)
	b, err := json.Marshal(in)
	if err != nil {
		return "ERR " + err.Error()
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])[:8]
}

func vectors() {
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<24), 1<<24)
	for sc.Scan() {
		kind, rest, _ := strings.Cut(sc.Text(), " ")
		switch kind {
		case "q":
			q, err := resource.ParseQuantity(rest)
			if err != nil {
				fmt.Printf("%s\tERR\n", rest)
				continue
			}
			b, _ := json.Marshal(q)
			fmt.Printf("%s\t%s\n", rest, b)
		case "t":
			key, doc, _ := strings.Cut(rest, " ")
			var t corev1.PodTemplateSpec
			if err := json.Unmarshal([]byte(doc), &t); err != nil {
				fmt.Printf("%s\tERR %v\n", key, err)
				continue
			}
			b, _ := json.Marshal(t)
			s := sha256.Sum256(b)
			fmt.Printf("%s\t%s\n", key, hex.EncodeToString(s[:]))
		case "g":
			key, doc, _ := strings.Cut(rest, " ")
			var g graph
			if err := json.Unmarshal([]byte(doc), &g); err != nil {
				fmt.Printf("%s\tERR %v\n", key, err)
				continue
			}
			fmt.Printf("%s\t%s\n", key, workerHash(&g))
		}
	}
}
