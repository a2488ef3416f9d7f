// Package codegen is the entc extension of entoutbox. Register it in your
// ent/entc.go, a program of its own:
//
//	//go:build ignore
//
//	package main
//
//	import (
//		"log"
//
//		"entgo.io/ent/entc"
//		"entgo.io/ent/entc/gen"
//
//		"github.com/entoutbox/entoutbox/codegen"
//
//		"example.com/shop/orderevents"
//	)
//
//	func main() {
//		ext := codegen.NewExtension(codegen.Events(orderevents.OrderPaid{}))
//		if err := entc.Generate("./schema", &gen.Config{}, entc.Extensions(ext)); err != nil {
//			log.Fatalf("running ent codegen: %v", err)
//		}
//	}
//
// and run it from ent/generate.go with go generate ./...:
//
//	package ent
//
//	//go:generate go run -mod=mod entc.go
//
// It validates the event declarations before anything is written (a refusal
// leaves every file of the ent package as it was), then generates into the
// ent package one struct per event version, a typed Emit method per event
// on *OutboxClient and, with the consumer tables, typed handlers.
//
// Only entc.go programs import this package: application binaries never
// carry the generator.
package codegen

import (
	"bytes"
	"embed"
	"errors"
	"os"
	"path/filepath"

	"entgo.io/ent/entc"
	"entgo.io/ent/entc/gen"

	"github.com/entoutbox/entoutbox/events"
)

// annotationKey is where the validated model hangs in gen.Config.Annotations
// for the templates.
const annotationKey = "EntOutbox"

//go:embed template/*.tmpl
var templateFS embed.FS

// Extension generates the outbox code. Create it with New.
type Extension struct {
	entc.DefaultExtension
	events []events.Interface
	// runtime is the target's runtime.go as it was before entc.Generate
	// stubbed it; nil when there was none.
	runtime *savedFile
}

type savedFile struct {
	path    string
	content []byte
}

// stubTag is what ent's gen.PrepareEnv puts in front of an existing
// runtime.go, so that the schema loads without importing the stale package.
const stubTag = "// +build tools\n"

// Option configures the Extension.
type Option func(*Extension)

// Events registers event declarations. Order is kept in the generated code.
func Events(evs ...events.Interface) Option {
	return func(e *Extension) { e.events = append(e.events, evs...) }
}

// NewExtension returns the extension for entc.Extensions (named as
// entgql's is).
func NewExtension(opts ...Option) *Extension {
	e := &Extension{}
	for _, opt := range opts {
		opt(e)
	}
	return e
}

// New is NewExtension.
//
// Deprecated: use NewExtension.
func New(opts ...Option) *Extension { return NewExtension(opts...) }

var _ entc.Extension = (*Extension)(nil)

// Options remembers the target's runtime.go. entc.Generate applies options
// before gen.PrepareEnv stubs that file, and ent (v0.14) undoes the stub only
// when generation succeeds: a refused generation would leave the package
// building without its runtime defaults, so the hooks put the file back.
func (e *Extension) Options() []entc.Option {
	return []entc.Option{func(cfg *gen.Config) error {
		e.runtime = nil
		path := filepath.Join(cfg.Target, "runtime.go")
		if b, err := os.ReadFile(path); err == nil {
			e.runtime = &savedFile{path: path, content: b}
		}
		return nil
	}}
}

// restoreRuntime undoes ent's stub of runtime.go, and only that: a file
// generation has since rewritten is left as it is.
func (e *Extension) restoreRuntime() error {
	f := e.runtime
	if f == nil {
		return nil
	}
	cur, err := os.ReadFile(f.path)
	if err != nil || !bytes.Equal(cur, append([]byte(stubTag), f.content...)) {
		return nil
	}
	return os.WriteFile(f.path, f.content, 0o644)
}

// Hooks validates the declarations and the ent graph before any file is
// generated: a refusal leaves the target directory as it was.
func (e *Extension) Hooks() []gen.Hook {
	return []gen.Hook{func(next gen.Generator) gen.Generator {
		return gen.GenerateFunc(func(g *gen.Graph) (err error) {
			defer func() {
				if err != nil {
					if rerr := e.restoreRuntime(); rerr != nil {
						err = errors.Join(err, rerr)
					}
				}
			}()
			m, err := Build(g, e.events)
			if err != nil {
				return err
			}
			if g.Annotations == nil {
				g.Annotations = gen.Annotations{}
			}
			g.Annotations[annotationKey] = m
			if err := next.Generate(g); err != nil {
				return err
			}
			return removeStale(g)
		})
	}}
}

// Templates are the outbox templates. ent names each generated file after
// its template (entoutbox_events.go, entoutbox_handlers.go), apart from the
// files of the Outbox schema (outbox_create.go, ...); template and function
// names are prefixed because ent merges every template and function
// globally.
func (e *Extension) Templates() []*gen.Template {
	return []*gen.Template{
		gen.MustParse(gen.NewTemplate("outbox_imports").ParseFS(templateFS, "template/outbox_imports.tmpl")),
		gen.MustParse(gen.NewTemplate("entoutbox_events").Funcs(funcs).
			ParseFS(templateFS, "template/entoutbox_header.tmpl", "template/entoutbox_events.tmpl")),
		// The consumer side needs the processed-events and dead-letter tables.
		gen.MustParse(gen.NewTemplate("entoutbox_handlers").Funcs(funcs).
			SkipIf(func(g *gen.Graph) bool { m := model(g.Annotations); return m == nil || !m.HasConsumers() }).
			ParseFS(templateFS, "template/entoutbox_header.tmpl", "template/entoutbox_handlers.tmpl")),
	}
}

var errInvalid = errors.New("entoutbox: invalid event declarations")
