package fleet

import (
	"os"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"
)

// The DaemonSet docs/fleet.md gives, checked with Kubernetes' own scheduling predicates
// (the taint/toleration and required node affinity filters of kube-scheduler and the
// DaemonSet controller): it puts a pod on the GPU nodes of GKE, EKS (node groups,
// Karpenter, Auto Mode) and of clusters running the GPU operator, and none on a CPU node.
// The nodes are labelled and tainted as each platform does.
func TestDocsDaemonSetSchedulesOnGPUNodes(t *testing.T) {
	doc, err := os.ReadFile("../../docs/fleet.md")
	if err != nil {
		t.Fatal(err)
	}
	var ds *appsv1.DaemonSet
	for _, m := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllSubmatch(doc, -1) {
		if strings.Contains(string(m[1]), "kind: DaemonSet") {
			ds = new(appsv1.DaemonSet)
			if err := yaml.UnmarshalStrict(m[1], ds); err != nil {
				t.Fatalf("docs/fleet.md's DaemonSet: %v", err)
			}
		}
	}
	if ds == nil {
		t.Fatal("docs/fleet.md has no DaemonSet")
	}
	pod := &corev1.Pod{Spec: ds.Spec.Template.Spec}
	gpuTaint := func(value string) []corev1.Taint {
		return []corev1.Taint{{Key: "nvidia.com/gpu", Value: value, Effect: corev1.TaintEffectNoSchedule}}
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		taints []corev1.Taint
		want   bool
	}{
		{"GKE B200 node pool", map[string]string{"cloud.google.com/gke-accelerator": "nvidia-b200", "cloud.google.com/gke-nodepool": "gpu"}, gpuTaint("present"), true},
		{"GKE A3 (H100, TCPX) node pool", map[string]string{"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}, gpuTaint("present"), true},
		{"EKS accelerated node group", map[string]string{"k8s.amazonaws.com/accelerator": "nvidia-tesla-h100", "node.kubernetes.io/instance-type": "p5.48xlarge"}, gpuTaint("true"), true},
		{"EKS Karpenter", map[string]string{"karpenter.k8s.aws/instance-gpu-manufacturer": "nvidia"}, gpuTaint(""), true},
		{"EKS Auto Mode", map[string]string{"eks.amazonaws.com/instance-gpu-manufacturer": "nvidia"}, gpuTaint(""), true},
		{"GPU operator, untainted", map[string]string{"nvidia.com/gpu.present": "true"}, nil, true},
		{"CPU node", map[string]string{"kubernetes.io/os": "linux", "cloud.google.com/gke-nodepool": "default-pool"}, nil, false},
		{"GPU operator says no GPU", map[string]string{"nvidia.com/gpu.present": "false"}, nil, false},
		{"GKE GPU node, cordoned for maintenance", map[string]string{"cloud.google.com/gke-accelerator": "nvidia-b200"},
			append(gpuTaint("present"), corev1.Taint{Key: "node.kubernetes.io/unschedulable", Effect: corev1.TaintEffectNoSchedule}), false},
	} {
		node := &corev1.Node{Spec: corev1.NodeSpec{Taints: tc.taints}}
		node.Labels = tc.labels
		taint, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, pod.Spec.Tolerations,
			func(t *corev1.Taint) bool {
				return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
			}, false)
		matches, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := matches && !untolerated; got != tc.want {
			t.Errorf("%s: scheduled %v, want %v (affinity matches %v, untolerated taint %v)", tc.name, got, tc.want, matches, taint)
		}
	}
}
