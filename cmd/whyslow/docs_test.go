//go:build unix

package main

// The docs test: every command of README.md and docs/*.md runs as written
// against whyslow built from this tree (this test binary, run as the
// command: see whyslowBin) and the shipped testdata, and every image the docs
// show is what its generator writes. The conventions, also in the README's
// "Development" section:
//
//   - Each line of a ```sh block is one command (a trailing `\` continues it),
//     run by sh from the repository root with that binary first on PATH.
//     A leading `whyslow`, `bin/whyslow` or `go run ./cmd/whyslow` runs that
//     binary; a `make build &&` before it stands for the test binary's build.
//   - A command must exit 0, unless its comment ends in `exit N` (or
//     `exit N|M`: any of them).
//   - `docs-test: skip (REASON)` in a command's comment skips it (it needs a
//     system the test does not start, such as Prometheus or Tempo, or it runs
//     for minutes); skips are counted and logged.
//   - `docs-test: server` starts the command before the others and stops it
//     after them; its `--listen 127.0.0.1:PORT` address is replaced by a free
//     port in every command.
//   - Paths under /tmp/ are replaced by a temporary directory.
//   - An image `![...](FILE.png)` needs a generator in the same docs:
//     `<!-- docs-image: whyslow ... --chart FILE.png -->` (repository-root
//     paths). The committed file must be what the generator writes;
//     `go generate ./cmd/whyslow` rewrites them.

//go:generate go test . -run TestDocs/images -count=1 -update-docs

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"image/png"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite the images the docs show (go generate ./cmd/whyslow)")

const (
	docsRoot = "../.."
	// docsCommandTimeout only stops a doc command that hangs; the slowest
	// (a 20s --scrape sample) takes well under it, and a busy machine may
	// take minutes over any.
	docsCommandTimeout = 10 * time.Minute
)

// docCommand is one command of a ```sh block.
type docCommand struct {
	file  string // relative to the repository root
	line  int
	block int // index of the block in its file
	text  string
	// shell is the command with its comment removed.
	shell  string
	exits  []int
	skip   string
	server bool
}

func (c docCommand) String() string { return fmt.Sprintf("%s:%d: %s", c.file, c.line, c.text) }

var (
	docExitRe   = regexp.MustCompile(`(?:^|[\s(;,])exit ([0-9]+(?:\|[0-9]+)*)\)?\s*$`)
	docSkipRe   = regexp.MustCompile(`docs-test:\s*skip\s*\(([^)]*)\)`)
	docServerRe = regexp.MustCompile(`docs-test:\s*server\b`)
	docListenRe = regexp.MustCompile(`--listen[ =](127\.0\.0\.1:[0-9]+)`)
	docImageRe  = regexp.MustCompile(`!\[[^\]]*\]\(([^)\s]+\.png)\)`)
	docGenRe    = regexp.MustCompile(`<!--\s*docs-image:\s*(.*?)\s*-->`)
	docChartRe  = regexp.MustCompile(`--chart[ =](\S+)`)
)

// docFiles returns README.md and docs/*.md, relative to the root.
func docFiles(t *testing.T) []string {
	t.Helper()
	md, err := filepath.Glob(filepath.Join(docsRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"README.md"}
	for _, m := range md {
		rel, _ := filepath.Rel(docsRoot, m)
		files = append(files, rel)
	}
	return files
}

// splitComment splits a shell line into the command and its comment: a `#`
// outside quotes at the start or after a blank.
func splitComment(line string) (cmd, comment string) {
	var quote rune
	for i, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
			return strings.TrimSpace(line[:i]), strings.TrimSpace(line[i+1:])
		}
	}
	return strings.TrimSpace(line), ""
}

// parseDocCommands returns the commands of the ```sh blocks of a markdown
// text.
func parseDocCommands(file, text string) ([]docCommand, error) {
	var out []docCommand
	in, block := false, -1
	pending, start := "", 0
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") {
			if in && pending != "" {
				return nil, fmt.Errorf("%s:%d: block ends inside a continued command", file, i+1)
			}
			in = !in && strings.TrimSpace(strings.TrimPrefix(trimmed, "```")) == "sh"
			if in {
				block++
			}
			continue
		}
		if !in || trimmed == "" && pending == "" {
			continue
		}
		if pending == "" {
			start = i + 1
		}
		if strings.HasSuffix(trimmed, `\`) {
			pending += strings.TrimSuffix(trimmed, `\`) + " "
			continue
		}
		full := pending + trimmed
		pending = ""
		shell, comment := splitComment(full)
		c := docCommand{file: file, line: start, block: block, text: full, shell: shell, exits: []int{0}}
		if shell == "" {
			continue // a comment line
		}
		if m := docSkipRe.FindStringSubmatch(comment); m != nil {
			c.skip = m[1]
			if c.skip == "" {
				return nil, fmt.Errorf("%s:%d: docs-test: skip needs a reason in parentheses", file, start)
			}
		}
		c.server = docServerRe.MatchString(comment)
		if m := docExitRe.FindStringSubmatch(comment); m != nil {
			c.exits = nil
			for _, s := range strings.Split(m[1], "|") {
				n, _ := strconv.Atoi(s)
				c.exits = append(c.exits, n)
			}
		}
		out = append(out, c)
	}
	if in {
		return nil, fmt.Errorf("%s: unterminated ```sh block", file)
	}
	return out, nil
}

// binaryPrefixes are the ways the docs run whyslow.
var binaryPrefixes = []string{"make build && bin/whyslow ", "bin/whyslow ", "go run ./cmd/whyslow ", "whyslow "}

// shellLine returns the command as the test runs it, or an error when it
// does not run whyslow.
func (c docCommand) shellLine(rewrites *strings.Replacer) (string, error) {
	s := c.shell + " "
	for _, p := range binaryPrefixes {
		if strings.HasPrefix(s, p) {
			return rewrites.Replace("whyslow " + strings.TrimSpace(strings.TrimPrefix(s, p))), nil
		}
	}
	return "", errors.New("not a whyslow command: run it with whyslow, or mark it `# docs-test: skip (reason)`")
}

// whyslowBin returns a directory holding `whyslow`: this test binary, which
// runs as the command when asWhyslowEnv is set (shellCommand sets it). It is
// the package main the tests exercise, so the docs need no second build.
func whyslowBin(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(self, filepath.Join(dir, "whyslow")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// shellCommand returns sh -c line, run from the root with bin first on
// PATH, in its own process group so that a timeout ends its children too.
func shellCommand(ctx context.Context, bin, line string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "sh", "-c", line)
	cmd.Dir = docsRoot
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), asWhyslowEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

func exitCode(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	return -1
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

func TestDocs(t *testing.T) {
	var all []docCommand
	texts := map[string]string{}
	for _, f := range docFiles(t) {
		b, err := os.ReadFile(filepath.Join(docsRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		texts[f] = string(b)
		cmds, err := parseDocCommands(f, string(b))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, cmds...)
	}
	if testing.Short() {
		// Running every command takes a minute on two cores: -short
		// checks only that each image has its generator and its file.
		testDocImages(t, "", texts)
		t.Skipf("-short: %d doc commands not run", len(all))
	}
	bin := whyslowBin(t)
	t.Run("images", func(t *testing.T) { testDocImages(t, bin, texts) })
	t.Run("commands", func(t *testing.T) { testDocCommands(t, bin, all) })
}

// testDocCommands runs every command: servers first, then each block's
// commands in order, the blocks in parallel.
func testDocCommands(t *testing.T, bin string, all []docCommand) {
	if *updateDocs {
		t.Skip("-update-docs: only the images")
	}
	tmp := t.TempDir()
	pairs := []string{"/tmp/", tmp + "/"}
	var servers []docCommand
	skipped := 0
	for _, c := range all {
		switch {
		case c.skip != "":
			skipped++
			t.Logf("skip %s:%d (%s)", c.file, c.line, c.skip)
		case c.server:
			m := docListenRe.FindStringSubmatch(c.shell)
			if m == nil {
				t.Fatalf("%s: a docs-test server needs --listen 127.0.0.1:PORT", c)
			}
			pairs = append(pairs, m[1], freeAddr(t))
			servers = append(servers, c)
		}
	}
	rewrites := strings.NewReplacer(pairs...)
	for _, c := range servers {
		startDocServer(t, bin, c, rewrites)
	}
	type blockKey struct {
		file  string
		block int
	}
	var order []blockKey
	blocks := map[blockKey][]docCommand{}
	ran := 0
	for _, c := range all {
		if c.skip != "" || c.server {
			continue
		}
		k := blockKey{c.file, c.block}
		if _, ok := blocks[k]; !ok {
			order = append(order, k)
		}
		blocks[k] = append(blocks[k], c)
		ran++
	}
	if ran < 5 {
		t.Fatalf("only %d runnable commands in the docs: is the ```sh parsing broken?", ran)
	}
	t.Logf("%d commands run, %d servers, %d skipped (docs-test: skip)", ran, len(servers), skipped)
	for _, k := range order {
		cmds := blocks[k]
		t.Run(fmt.Sprintf("%s:%d", k.file, cmds[0].line), func(t *testing.T) {
			t.Parallel()
			for _, c := range cmds {
				runDocCommand(t, bin, c, rewrites)
			}
		})
	}
}

func runDocCommand(t *testing.T, bin string, c docCommand, rewrites *strings.Replacer) {
	t.Helper()
	line, err := c.shellLine(rewrites)
	if err != nil {
		t.Errorf("%s: %v", c, err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), docsCommandTimeout)
	defer cancel()
	cmd := shellCommand(ctx, bin, line)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	code := exitCode(err)
	if ctx.Err() != nil {
		t.Errorf("%s: still running after %s", c, docsCommandTimeout)
		return
	}
	if !slices.Contains(c.exits, code) {
		t.Errorf("%s: exit %d, the doc says %v (%v)\nstdout: %s\nstderr: %s", c, code, c.exits, err,
			tail(stdout.Bytes(), 1500), tail(stderr.Bytes(), 1500))
	}
}

// freeAddr returns a loopback address with a free port.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startDocServer starts a `docs-test: server` command, waits until its
// address accepts connections, and stops it when the test ends.
func startDocServer(t *testing.T, bin string, c docCommand, rewrites *strings.Replacer) {
	t.Helper()
	line, err := c.shellLine(rewrites)
	if err != nil {
		t.Fatalf("%s: %v", c, err)
	}
	addr := rewrites.Replace(docListenRe.FindStringSubmatch(c.shell)[1])
	ctx, cancel := context.WithCancel(context.Background())
	cmd := shellCommand(ctx, bin, "exec "+line)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("%s: %v", c, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cancel()
			<-done
		}
		cancel()
	})
	deadline := time.Now().Add(5 * time.Minute) // a hang guard
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return
		}
		select {
		case err := <-done:
			t.Fatalf("%s: exited before serving: %v\n%s", c, err, out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s does not accept connections: %v", c, addr, err)
		}
	}
}

// testDocImages checks that every image the docs show has a generator and
// is what it writes (-update-docs: writes it); without a binary, only that
// the generator and the file exist.
func testDocImages(t *testing.T, bin string, texts map[string]string) {
	gens := map[string]string{} // image path (root-relative) → command
	for f, text := range texts {
		for _, m := range docGenRe.FindAllStringSubmatch(text, -1) {
			cm := docChartRe.FindStringSubmatch(m[1])
			if cm == nil || !strings.HasPrefix(m[1], "whyslow ") {
				t.Errorf("%s: docs-image %q: want `whyslow ... --chart FILE.png`", f, m[1])
				continue
			}
			gens[filepath.Clean(cm[1])] = m[1]
		}
	}
	images := map[string]bool{}
	for f, text := range texts {
		for _, m := range docImageRe.FindAllStringSubmatch(text, -1) {
			img := filepath.Clean(filepath.Join(filepath.Dir(f), m[1]))
			if images[img] {
				continue
			}
			images[img] = true
			gen, ok := gens[img]
			if !ok {
				t.Errorf("%s: image %s has no `<!-- docs-image: whyslow ... --chart %s -->` generator", f, m[1], img)
				continue
			}
			if bin == "" {
				if _, err := os.Stat(filepath.Join(docsRoot, img)); err != nil {
					t.Errorf("%s: %v (go generate ./cmd/whyslow writes it)", img, err)
				}
				continue
			}
			checkDocImage(t, bin, img, gen)
		}
	}
	if len(images) == 0 {
		t.Error("no image in the docs: is the image parsing broken?")
	}
}

func checkDocImage(t *testing.T, bin, img, gen string) {
	t.Helper()
	// The generator runs from the root: as written it writes the committed
	// file (-update-docs), else a temporary one to compare.
	out, line := filepath.Join(t.TempDir(), filepath.Base(img)), gen
	if !*updateDocs {
		if _, err := os.Stat(filepath.Join(docsRoot, img)); err != nil {
			t.Errorf("%s: %v (go generate ./cmd/whyslow writes it)", img, err)
			return
		}
		line = strings.Replace(line, "--chart "+img, "--chart "+out, 1)
		line = strings.Replace(line, "--chart="+img, "--chart="+out, 1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), docsCommandTimeout)
	defer cancel()
	cmd := shellCommand(ctx, bin, line)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); exitCode(err) != exitOK && exitCode(err) != exitCause {
		t.Fatalf("%s: %s: %v\n%s", img, gen, err, stderr.String())
	}
	if *updateDocs {
		// The chart is written through a private temporary file.
		if err := os.Chmod(filepath.Join(docsRoot, img), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", img)
		return
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(docsRoot, img))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(got, want) {
		return
	}
	gi, err1 := png.Decode(bytes.NewReader(got))
	wi, err2 := png.Decode(bytes.NewReader(want))
	switch {
	case err2 != nil:
		t.Errorf("%s: not a PNG (%v): run go generate ./cmd/whyslow", img, err2)
	case err1 != nil:
		t.Errorf("%s: the generator wrote no PNG: %v", out, err1)
	case gi.Bounds() != wi.Bounds():
		t.Errorf("%s is %v, %s writes %v: run go generate ./cmd/whyslow", img, wi.Bounds(), gen, gi.Bounds())
	case runtime.GOARCH == "amd64":
		// Rasterising is exact on one architecture; elsewhere (arm64 fuses
		// multiply-adds) pixels may differ in the last bit.
		t.Errorf("%s is not what %s writes: run go generate ./cmd/whyslow", img, gen)
	}
}

// TestParseDocCommands pins the conventions of the docs test.
func TestParseDocCommands(t *testing.T) {
	md := "text\n```sh\n" +
		"whyslow why --bundle testdata/incidents/kv_pressure   # a recorded incident; exit 1\n" +
		"whyslow why --scrape http://127.0.0.1:8000/metrics    # exit 0|1\n" +
		"# a comment line\n" +
		"whyslow why --prometheus http://prom:9090 --selector 'model_name=\"a#b\"'  # docs-test: skip (needs Prometheus)\n" +
		"whyslow sim serve --listen 127.0.0.1:8000 \\\n  --speed 60   # docs-test: server\n" +
		"whyslow rules check x.yaml   # every error as file:line:col, exit 2 on any\n" +
		"```\n```yaml\nnot: run\n```\n"
	cmds, err := parseDocCommands("x.md", md)
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		line   int
		shell  string
		exits  []int
		skip   string
		server bool
	}
	wants := []want{
		{3, "whyslow why --bundle testdata/incidents/kv_pressure", []int{1}, "", false},
		{4, "whyslow why --scrape http://127.0.0.1:8000/metrics", []int{0, 1}, "", false},
		{6, `whyslow why --prometheus http://prom:9090 --selector 'model_name="a#b"'`, []int{0}, "needs Prometheus", false},
		{7, "whyslow sim serve --listen 127.0.0.1:8000  --speed 60", []int{0}, "", true},
		{9, "whyslow rules check x.yaml", []int{0}, "", false},
	}
	if len(cmds) != len(wants) {
		t.Fatalf("%d commands, want %d: %+v", len(cmds), len(wants), cmds)
	}
	for i, w := range wants {
		c := cmds[i]
		if c.line != w.line || c.shell != w.shell || !slices.Equal(c.exits, w.exits) || c.skip != w.skip || c.server != w.server {
			t.Errorf("command %d = %+v, want %+v", i, c, w)
		}
	}
	r := strings.NewReplacer("127.0.0.1:8000", "127.0.0.1:1234")
	for _, in := range []string{"go run ./cmd/whyslow demo", "make build && bin/whyslow demo", "bin/whyslow demo"} {
		if got, err := (docCommand{shell: in}).shellLine(r); err != nil || got != "whyslow demo" {
			t.Errorf("%q runs as %q, %v", in, got, err)
		}
	}
	if _, err := (docCommand{shell: "make test"}).shellLine(r); err == nil {
		t.Error("make test accepted as a whyslow command")
	}
	if _, err := parseDocCommands("x.md", "```sh\nwhyslow x # docs-test: skip ()\n```\n"); err == nil {
		t.Error("a skip without a reason parsed")
	}
}
