// decodecheck reads MPIJobs, one JSON object per line on stdin (as the API server returned them),
// and decodes each strictly into Go types of kubeflow.org/v2beta1 built on k8s.io/api's core/v1
// PodTemplateSpec and ResourceList: what every Go client of MPIJobs (Kueue, the upstream operator,
// client-go informers) does with the objects the CRD lets through. For each line it prints one JSON
// line: {"ok": true} or {"ok": false, "error": "..."} (also when a decode takes over 5s). The types are written here (the fields of
// the v2beta1 API, docs/architecture.md), not imported, so the checker depends on k8s.io/api only.
package main

import (
	"bufio"
	"encoding/json"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsjson "sigs.k8s.io/json"
)

type mpiJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              mpiJobSpec `json:"spec,omitempty"`
	Status            jobStatus  `json:"status,omitempty"`
}

type mpiJobSpec struct {
	SlotsPerWorker         *int32                  `json:"slotsPerWorker,omitempty"`
	RunLauncherAsWorker    *bool                   `json:"runLauncherAsWorker,omitempty"`
	SSHAuthMountPath       string                  `json:"sshAuthMountPath,omitempty"`
	LauncherCreationPolicy string                  `json:"launcherCreationPolicy,omitempty"`
	MPIImplementation      string                  `json:"mpiImplementation,omitempty"`
	RunPolicy              runPolicy               `json:"runPolicy,omitempty"`
	MPIReplicaSpecs        map[string]*replicaSpec `json:"mpiReplicaSpecs"`
}

type runPolicy struct {
	CleanPodPolicy          *string           `json:"cleanPodPolicy,omitempty"`
	TTLSecondsAfterFinished *int32            `json:"ttlSecondsAfterFinished,omitempty"`
	ActiveDeadlineSeconds   *int64            `json:"activeDeadlineSeconds,omitempty"`
	BackoffLimit            *int32            `json:"backoffLimit,omitempty"`
	SchedulingPolicy        *schedulingPolicy `json:"schedulingPolicy,omitempty"`
	Suspend                 *bool             `json:"suspend,omitempty"`
	ManagedBy               *string           `json:"managedBy,omitempty"`
}

type schedulingPolicy struct {
	MinAvailable           *int32               `json:"minAvailable,omitempty"`
	Queue                  string               `json:"queue,omitempty"`
	MinResources           *corev1.ResourceList `json:"minResources,omitempty"`
	PriorityClass          string               `json:"priorityClass,omitempty"`
	ScheduleTimeoutSeconds *int32               `json:"scheduleTimeoutSeconds,omitempty"`
}

type replicaSpec struct {
	Replicas      *int32                 `json:"replicas,omitempty"`
	Template      corev1.PodTemplateSpec `json:"template,omitempty"`
	RestartPolicy string                 `json:"restartPolicy,omitempty"`
}

type jobStatus struct {
	Conditions        []jobCondition            `json:"conditions,omitempty"`
	ReplicaStatuses   map[string]*replicaStatus `json:"replicaStatuses,omitempty"`
	StartTime         *metav1.Time              `json:"startTime,omitempty"`
	CompletionTime    *metav1.Time              `json:"completionTime,omitempty"`
	LastReconcileTime *metav1.Time              `json:"lastReconcileTime,omitempty"`
}

type jobCondition struct {
	Type               string      `json:"type"`
	Status             string      `json:"status"`
	Reason             string      `json:"reason,omitempty"`
	Message            string      `json:"message,omitempty"`
	LastUpdateTime     metav1.Time `json:"lastUpdateTime,omitempty"`
	LastTransitionTime metav1.Time `json:"lastTransitionTime,omitempty"`
}

type replicaStatus struct {
	Active        int32                 `json:"active,omitempty"`
	Succeeded     int32                 `json:"succeeded,omitempty"`
	Failed        int32                 `json:"failed,omitempty"`
	LabelSelector *metav1.LabelSelector `json:"labelSelector,omitempty"`
	Selector      string                `json:"selector,omitempty"`
}

type result struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// check decodes one object strictly: a type error, an unknown field, a duplicate or case-mismatched
// key is an error, as with the API machinery's strict decoding.
func check(line []byte) result {
	var job mpiJob
	strict, err := sigsjson.UnmarshalStrict(line, &job)
	if err != nil {
		return result{Error: err.Error()}
	}
	if len(strict) > 0 {
		return result{Error: strict[0].Error()}
	}
	return result{OK: true}
}

// slowDecode bounds one decode: some quantities (a huge negative exponent) keep resource.ParseQuantity
// busy for minutes, which a client meets as a hung informer; reported as an error, not waited for.
const slowDecode = 5 * time.Second

func checkBounded(line []byte) result {
	done := make(chan result, 1)
	go func() { done <- check(line) }()
	select {
	case r := <-done:
		return r
	case <-time.After(slowDecode):
		return result{Error: "decoding took longer than " + slowDecode.String()}
	}
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		if len(in.Bytes()) == 0 {
			continue
		}
		if err := out.Encode(checkBounded(append([]byte(nil), in.Bytes()...))); err != nil {
			os.Exit(1)
		}
	}
	if err := in.Err(); err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
}
