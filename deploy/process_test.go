package deploy

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
)

// binary is the leasehold binary the process tests run, built once.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "leasehold-deploy-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "leasehold")
	if out, err := exec.Command("go", "build", "-C", "..", "-o", binary, "./cmd/leasehold").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build leasehold: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// started is a process a test started; kill and stop end it by its PID.
type started struct {
	cmd    *exec.Cmd
	log    *syncBuffer
	exited chan struct{} // closed once the process was waited for
	err    error         // its exit error, written before exited is closed
}

func start(t *testing.T, cmd *exec.Cmd) *started {
	t.Helper()
	p := &started{cmd: cmd, log: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("log of %v:\n%s", cmd.Args, tail(p.log.String(), 3000))
		}
	})
	return p
}

// kill ends the process with SIGKILL, if it still runs, and waits for it.
func (p *started) kill() {
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
	}
}

// stop sends SIGTERM and returns the exit error, failing after 20 s.
func (p *started) stop(t *testing.T) error {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return p.err
	case <-time.After(20 * time.Second):
		t.Fatalf("%v still runs 20 s after SIGTERM", p.cmd.Args)
		return nil
	}
}

// syncBuffer is a bytes.Buffer safe for the process's writes and the
// test's reads.
type syncBuffer struct {
	mu sync.Mutex // protects following
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// waitReady polls url until it answers 200, for up to d.
func waitReady(t *testing.T, hc *http.Client, url string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		resp, err := hc.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready within %v: %v", url, d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSystemdExecStartServes runs the unit's ExecStart as systemd would
// with no settings file (the binary at its path, ${STATE_DIRECTORY} a new
// directory, an empty environment): it serves on 127.0.0.1:7420, and
// KillSignal stops it with status 0; started again on the same directory
// it keeps what was written.
func TestSystemdExecStartServes(t *testing.T) {
	unit, err := os.ReadFile("systemd/leasehold.service")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^ExecStart=(.*)$`).FindSubmatch(unit)
	sig := regexp.MustCompile(`(?m)^KillSignal=SIGTERM$`).Find(unit)
	if m == nil || sig == nil {
		t.Fatal("the unit needs one ExecStart= and KillSignal=SIGTERM")
	}
	state := t.TempDir()
	argv := strings.Fields(strings.ReplaceAll(string(m[1]), "${STATE_DIRECTORY}", state))
	if argv[0] != "/usr/local/bin/leasehold" {
		t.Fatalf("ExecStart runs %s, want /usr/local/bin/leasehold", argv[0])
	}
	run := func() *started {
		cmd := exec.Command(binary, argv[1:]...)
		cmd.Env = []string{"STATE_DIRECTORY=" + state}
		return start(t, cmd)
	}
	p := run()
	waitReady(t, http.DefaultClient, "http://127.0.0.1:7420/readyz", 20*time.Second)
	var grant struct{ Token uint64 }
	cliJSON(t, &grant, "acquire", "unit", "--ttl", "1h", "--endpoints", "127.0.0.1:7420")
	if err := p.stop(t); err != nil {
		t.Fatalf("the unit's process after SIGTERM: %v, want status 0\n%s", err, tail(p.log.String(), 2000))
	}
	p = run()
	waitReady(t, http.DefaultClient, "http://127.0.0.1:7420/readyz", 20*time.Second)
	out, err := exec.Command(binary, "acquire", "unit", "--wait", "0", "--endpoints", "127.0.0.1:7420").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "locked") {
		t.Fatalf("after a restart on the same StateDirectory the grant is gone: %v\n%s", err, out)
	}
	if err := p.stop(t); err != nil {
		t.Fatalf("second stop: %v", err)
	}
}

// cliJSON runs the leasehold CLI with -o json and decodes its output.
func cliJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	out, err := exec.Command(binary, append(args, "-o", "json")...).Output()
	if err != nil {
		t.Fatalf("leasehold %v: %v\n%s", args, err, out)
	}
	if err := json.Unmarshal(out, v); err != nil {
		t.Fatalf("leasehold %v printed %s: %v", args, out, err)
	}
}

// testCA writes ca.crt, and tls.crt and tls.key signed by it for names
// and ips (server and client use), into dir: what the Secret holds.
func testCA(t *testing.T, dir string, names []string, ips []net.IP) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "leasehold-ca"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "node"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		DNSNames: names, IPAddresses: ips, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for name, block := range map[string]*pem.Block{"ca.crt": {Type: "CERTIFICATE", Bytes: caDER}, "tls.crt": {Type: "CERTIFICATE", Bytes: der}, "tls.key": {Type: "PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// pod is one replica of the StatefulSet run as a process: its argv with
// the environment substituted ($(VAR) as the kubelet expands it) and each
// volume's mountPath replaced by a directory of the test.
type pod struct {
	name, ip string
	argv     []string
	env      []string
	data     string
	proc     *started
}

// podsOf builds the replicas of s: pod i is named NAME-i with the address
// 127.0.0.(10+i); tlsDir stands for the Secret's volume.
func podsOf(t *testing.T, s appsv1.StatefulSet, tlsDir string) []*pod {
	t.Helper()
	c := s.Spec.Template.Spec.Containers[0]
	var pods []*pod
	for i := range int(*s.Spec.Replicas) {
		p := &pod{name: fmt.Sprintf("%s-%d", s.Name, i), ip: fmt.Sprintf("127.0.0.%d", 10+i), data: t.TempDir()}
		vars := map[string]string{}
		for _, e := range c.Env {
			switch {
			case e.ValueFrom == nil:
				vars[e.Name] = e.Value
			case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
				vars[e.Name] = p.name
			case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP":
				vars[e.Name] = p.ip
			default:
				t.Fatalf("env %s: a source this test does not know", e.Name)
			}
			p.env = append(p.env, e.Name+"="+vars[e.Name])
		}
		mounts := map[string]string{}
		for _, m := range c.VolumeMounts {
			switch {
			case len(s.Spec.VolumeClaimTemplates) == 1 && m.Name == s.Spec.VolumeClaimTemplates[0].Name:
				mounts[m.MountPath] = p.data
			case secretVolume(s, m.Name) != "":
				mounts[m.MountPath] = tlsDir
			default:
				t.Fatalf("volume mount %s: not the data claim nor a Secret", m.Name)
			}
		}
		expand := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
		for _, a := range append(append([]string(nil), c.Command...), c.Args...) {
			a = expand.ReplaceAllStringFunc(a, func(ref string) string {
				if v, ok := vars[ref[2:len(ref)-1]]; ok {
					return v
				}
				return ref
			})
			if k, v, ok := strings.Cut(a, "="); ok {
				for path, dir := range mounts {
					if v == path || strings.HasPrefix(v, path+"/") {
						a = k + "=" + dir + strings.TrimPrefix(v, path)
					}
				}
			}
			p.argv = append(p.argv, a)
		}
		pods = append(pods, p)
	}
	return pods
}

func secretVolume(s appsv1.StatefulSet, name string) string {
	for _, v := range s.Spec.Template.Spec.Volumes {
		if v.Name == name && v.Secret != nil {
			return v.Secret.SecretName
		}
	}
	return ""
}

// run starts p in a mount namespace of its own whose /etc/hosts names
// every pod at its headless-Service name and api at the address the
// client Service leads to (a ready pod), as the cluster's DNS would.
func (p *pod) run(t *testing.T, pods []*pod, headless, apiService, api string) {
	t.Helper()
	var hosts strings.Builder
	for _, q := range pods {
		fmt.Fprintf(&hosts, "%s %s.%s\n", q.ip, q.name, headless)
	}
	fmt.Fprintf(&hosts, "%s %s\n", api, apiService)
	file := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(file, []byte(hosts.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--mount", "--propagation", "private", "--", "sh", "-c", `mount --bind "$0" /etc/hosts && exec "$@"`, file, binary}, p.argv...)
	cmd := exec.Command("unshare", args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, p.env...)
	p.proc = start(t, cmd)
}

// TestKubernetesPodsFormAndRecover runs the StatefulSet's pods as three
// processes with their exact argv (environment substituted, volumes as
// directories, DNS as the cluster would answer): they found the cluster
// over TLS, take an acknowledged grant and write; one pod loses its volume
// and restarts with the same argv; it joins again instead of founding, and
// nothing acknowledged is lost. Needs root (a mount namespace per pod for
// its /etc/hosts).
func TestKubernetesPodsFormAndRecover(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root: each pod runs in a mount namespace with its own /etc/hosts (CI runs as root)")
	}
	sts, svcs, _ := manifests(t)
	s := sts[0]
	var apiService string
	for _, svc := range svcs {
		if svc.Name != s.Spec.ServiceName {
			apiService = svc.Name
		}
	}
	tlsDir := t.TempDir()
	pods := podsOf(t, s, tlsDir)
	var names []string
	var ips []net.IP
	for _, p := range pods {
		names = append(names, p.name+"."+s.Spec.ServiceName)
		ips = append(ips, net.ParseIP(p.ip))
	}
	testCA(t, tlsDir, append(names, apiService), ips)
	caPEM, _ := os.ReadFile(filepath.Join(tlsDir, "ca.crt"))
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}, Timeout: 2 * time.Second}

	for _, p := range pods {
		p.run(t, pods, s.Spec.ServiceName, apiService, pods[0].ip)
	}
	for _, p := range pods {
		waitReady(t, hc, "https://"+p.ip+":7420/readyz", 60*time.Second)
	}
	eps := "--endpoints=https://" + pods[0].ip + ":7420,https://" + pods[1].ip + ":7420,https://" + pods[2].ip + ":7420"
	ca := "--cacert=" + filepath.Join(tlsDir, "ca.crt")
	var grant struct{ Token uint64 }
	cliJSON(t, &grant, "acquire", "acked", "--ttl", "1h", eps, ca)
	var put struct{ Status string }
	cliJSON(t, &put, "kv", "put", "k", "acked-value", "--token", fmt.Sprint(grant.Token), eps, ca)

	lost := pods[1]
	lost.proc.kill()
	if err := os.RemoveAll(lost.data); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(lost.data, 0o700); err != nil { // a new, empty volume
		t.Fatal(err)
	}
	lost.run(t, pods, s.Spec.ServiceName, apiService, pods[0].ip)
	waitReady(t, hc, "https://"+lost.ip+":7420/readyz", 60*time.Second)

	var kv struct {
		Value string
		Token uint64
	}
	one := "--endpoints=https://" + lost.ip + ":7420"
	cliJSON(t, &kv, "kv", "get", "k", one, ca)
	if kv.Value != "acked-value" || kv.Token != grant.Token {
		t.Fatalf("kv get k through the rejoined pod: %+v, want acked-value with token %d", kv, grant.Token)
	}
	out, err := exec.Command(binary, "acquire", "acked", "--wait", "0", one, ca).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "locked") {
		t.Fatalf("the acknowledged grant after the pod rejoined: %v\n%s", err, out)
	}
	if !strings.Contains(lost.proc.log.String(), "joined the cluster as a non-voter") {
		t.Errorf("the pod on an empty volume did not join:\n%s", tail(lost.proc.log.String(), 2000))
	}
	// It becomes a voter again once caught up.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var m struct {
			Members []struct {
				ID, Suffrage string
			}
		}
		cliJSON(t, &m, "cluster", "members", eps, ca)
		voters := 0
		for _, mem := range m.Members {
			if mem.Suffrage == "Voter" {
				voters++
			}
		}
		if voters == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("members after the rejoin: %+v, want 3 voters", m.Members)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
