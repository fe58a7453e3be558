package deploy

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// need returns the path of a tool; without it the test is skipped on a
// developer machine and fails in CI (CI=true), where
// scripts/ci-services.sh installs it.
func need(t *testing.T, tool, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(tool)
	if err == nil {
		return p
	}
	t.Fatalf("%s is not installed (apt-get install %s; scripts/ci-services.sh does)", tool, pkg)
	return ""
}

// TestSystemdUnitVerifies runs systemd-analyze verify on the unit, with
// ExecStart pointed at an existing executable (verify checks it exists).
func TestSystemdUnitVerifies(t *testing.T) {
	analyze := need(t, "systemd-analyze", "systemd")
	unit, err := os.ReadFile("systemd/leasehold.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"DynamicUser=yes", "StateDirectory=leasehold", "ProtectSystem=strict", "NoNewPrivileges=yes",
		"ProtectHome=yes", "PrivateTmp=yes", "CapabilityBoundingSet=\n", "ExecStart=/usr/local/bin/leasehold serve --data ${STATE_DIRECTORY}",
	} {
		if !bytes.Contains(unit, []byte(want)) {
			t.Errorf("the unit lacks %q", want)
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "leasehold.service")
	if err := os.WriteFile(path, bytes.ReplaceAll(unit, []byte("/usr/local/bin/leasehold"), []byte(self)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	// verify also reports problems of unrelated units on the host; only
	// lines about this unit count.
	var ours []string
	for line := range strings.Lines(string(out)) {
		if strings.Contains(line, "leasehold.service") {
			ours = append(ours, strings.TrimSpace(line))
		}
	}
	if len(ours) > 0 || (err != nil && len(strings.TrimSpace(string(out))) == 0) {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// manifests decodes every document of kubernetes/*.yaml strictly into its
// Kubernetes API type.
func manifests(t *testing.T) (sts []appsv1.StatefulSet, svcs []corev1.Service, pdbs []policyv1.PodDisruptionBudget) {
	t.Helper()
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in kubernetes/: %v", err)
	}
	sep := regexp.MustCompile(`(?m)^---\s*$`)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range sep.Split(string(data), -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			where := fmt.Sprintf("%s document %d (%s %s)", f, i, tm.APIVersion, tm.Kind)
			strict := func(v any) {
				if err := yaml.UnmarshalStrict([]byte(doc), v); err != nil {
					t.Fatalf("%s: %v", where, err)
				}
			}
			switch tm.APIVersion + " " + tm.Kind {
			case "apps/v1 StatefulSet":
				var o appsv1.StatefulSet
				strict(&o)
				sts = append(sts, o)
			case "v1 Service":
				var o corev1.Service
				strict(&o)
				svcs = append(svcs, o)
			case "policy/v1 PodDisruptionBudget":
				var o policyv1.PodDisruptionBudget
				strict(&o)
				pdbs = append(pdbs, o)
			default:
				t.Fatalf("%s: a kind this test does not validate", where)
			}
		}
	}
	return sts, svcs, pdbs
}

func stripComments(doc string) string {
	var b strings.Builder
	for line := range strings.Lines(doc) {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line)
		}
	}
	return b.String()
}

// TestKubernetesManifests: the manifests decode strictly, and fit together:
// a StatefulSet of three started in parallel (no pod is ready before a
// quorum), its headless Service publishing not-ready pods, a PDB that
// never lets two go, a --bootstrap list naming exactly the three pods at
// their headless-Service DNS names with --join for a pod on an empty
// volume, TLS from the Secret, HTTPS probes on the API port.
func TestKubernetesManifests(t *testing.T) {
	sts, svcs, pdbs := manifests(t)
	if len(sts) != 1 || len(pdbs) != 1 {
		t.Fatalf("%d StatefulSets and %d PodDisruptionBudgets, want 1 each", len(sts), len(pdbs))
	}
	s := sts[0]
	if s.Spec.Replicas == nil || *s.Spec.Replicas != 3 {
		t.Errorf("replicas = %v, want 3", s.Spec.Replicas)
	}
	if s.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("podManagementPolicy = %q, want Parallel (OrderedReady waits forever for a quorum)", s.Spec.PodManagementPolicy)
	}
	podLabels := labels.Set(s.Spec.Template.Labels)
	sel, err := metav1.LabelSelectorAsSelector(s.Spec.Selector)
	if err != nil || !sel.Matches(podLabels) {
		t.Errorf("the StatefulSet's selector does not match its pods: %v", err)
	}
	var headless *corev1.Service
	for i := range svcs {
		if svcs[i].Name == s.Spec.ServiceName {
			headless = &svcs[i]
		}
		if !labels.SelectorFromSet(svcs[i].Spec.Selector).Matches(podLabels) {
			t.Errorf("Service %s selects no leasehold pod", svcs[i].Name)
		}
	}
	if headless == nil || headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses {
		t.Fatalf("serviceName %q must be a headless Service (clusterIP None) that publishes not-ready addresses", s.Spec.ServiceName)
	}
	pdbSel, err := metav1.LabelSelectorAsSelector(pdbs[0].Spec.Selector)
	if err != nil || !pdbSel.Matches(podLabels) {
		t.Errorf("the PDB does not select the pods: %v", err)
	}
	if mu := pdbs[0].Spec.MaxUnavailable; mu == nil || mu.IntValue() != 1 {
		t.Errorf("PDB maxUnavailable = %v, want 1", mu)
	}

	if len(s.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(s.Spec.Template.Spec.Containers))
	}
	c := s.Spec.Template.Spec.Containers[0]
	flags := map[string]string{}
	for _, a := range c.Args[1:] {
		k, v, _ := strings.Cut(a, "=")
		flags[k] = v
	}
	if c.Args[0] != "serve" {
		t.Errorf("args[0] = %q, want serve", c.Args[0])
	}
	var want []string
	for i := range int(*s.Spec.Replicas) {
		pod := fmt.Sprintf("%s-%d", s.Name, i)
		want = append(want, fmt.Sprintf("%s=%s.%s:7520", pod, pod, headless.Name))
	}
	if got := strings.Split(flags["--bootstrap"], ","); !slices.Equal(got, want) {
		t.Errorf("--bootstrap = %v, want %v", got, want)
	}
	for flag, v := range map[string]string{
		"--node-id": "$(POD_NAME)", "--raft-addr": "$(POD_NAME)." + headless.Name + ":7520",
		"--advertise": "$(POD_NAME)." + headless.Name + ":7420", "--listen": "$(POD_IP):7420", "--data": "/data",
		"--join": "leasehold-api:7420", "--cert": "/tls/tls.crt", "--peer-cert": "/tls/tls.crt",
	} {
		if flags[flag] != v {
			t.Errorf("%s = %q, want %q", flag, flags[flag], v)
		}
	}
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"readiness", c.ReadinessProbe, "/readyz"}, {"liveness", c.LivenessProbe, "/healthz"}, {"startup", c.StartupProbe, "/healthz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("%s must be an HTTPS GET of %s (the API serves TLS only): %+v", p.name, p.path, p.probe)
		}
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		mounted = mounted || (m.MountPath == "/data" && len(s.Spec.VolumeClaimTemplates) == 1 && m.Name == s.Spec.VolumeClaimTemplates[0].Name)
	}
	if !mounted {
		t.Errorf("/data is not the volume claim template's volume")
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("the container must have a read-only root and no privilege escalation")
	}
}

// TestDockerfilesRunAlike: the image users build (../Dockerfile, multi-stage)
// and the one scripts/image.sh builds and CI runs (container/Dockerfile,
// an empty base) run the same way: their runtime lines are the same.
func TestDockerfilesRunAlike(t *testing.T) {
	runtime := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		_, after, ok := strings.Cut(string(b), "# --- runtime")
		if !ok {
			t.Fatalf("%s has no \"# --- runtime\" section", path)
		}
		return after
	}
	if a, b := runtime("../Dockerfile"), runtime("container/Dockerfile"); a != b {
		t.Fatalf("the runtime sections differ:\n../Dockerfile:%s\ncontainer/Dockerfile:%s", a, b)
	}
}

// TestCertManagerMakesNodeCertificates: the cert-manager example issues
// what the Raft port takes as a node's certificate (CN node, server and
// client auth), as the pods of TestKubernetesPodsFormAndRecover present.
func TestCertManagerMakesNodeCertificates(t *testing.T) {
	b, err := os.ReadFile("kubernetes/cert-manager/leasehold-tls.yaml")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var c struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Spec struct {
				CommonName string   `json:"commonName"`
				Usages     []string `json:"usages"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(doc), &c); err != nil {
			t.Fatal(err)
		}
		if c.Kind != "Certificate" || c.Metadata.Name != "leasehold-tls" {
			continue
		}
		found = true
		if c.Spec.CommonName != "node" || !slices.Contains(c.Spec.Usages, "server auth") || !slices.Contains(c.Spec.Usages, "client auth") {
			t.Errorf("leasehold-tls: commonName %q, usages %v; a node's certificate needs CN node with server and client auth", c.Spec.CommonName, c.Spec.Usages)
		}
	}
	if !found {
		t.Fatal("no Certificate leasehold-tls in the cert-manager example")
	}
}
