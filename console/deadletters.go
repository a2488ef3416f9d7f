package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/entoutbox/entoutbox/admin"
)

// letterLimit is how many dead letters a list shows.
const letterLimit = 200

// letterForm is the filter of the dead-letter list, also sent with a bulk
// action on every letter it selects.
type letterForm struct {
	Source, Event, Reason, State, Since, Until string
}

func letterFormOf(v url.Values) letterForm {
	f := letterForm{Source: strings.TrimSpace(v.Get("source")), Event: strings.TrimSpace(v.Get("event")),
		Reason: strings.TrimSpace(v.Get("reason")), State: strings.TrimSpace(v.Get("state")),
		Since: strings.TrimSpace(v.Get("since")), Until: strings.TrimSpace(v.Get("until"))}
	return f
}

func (f letterForm) filter() (admin.Filter, error) {
	since, err := parseWhen(f.Since)
	if err != nil {
		return admin.Filter{}, fmt.Errorf("since: %w", err)
	}
	until, err := parseWhen(f.Until)
	if err != nil {
		return admin.Filter{}, fmt.Errorf("until: %w", err)
	}
	state := admin.State(f.State)
	if f.State == "any" {
		state = ""
	}
	return admin.Filter{Source: f.Source, Event: f.Event, Reason: f.Reason, Since: since, Until: until, State: state}, nil
}

type lettersPage struct {
	Form    letterForm
	Letters []admin.DeadLetter
	Limited bool
	Problem string
}

func (c *Console) deadLetters(w http.ResponseWriter, r *http.Request) {
	form := letterFormOf(r.URL.Query())
	if form.State == "" {
		form.State = string(admin.StateOpen)
	}
	p := lettersPage{Form: form}
	f, err := form.filter()
	if err != nil {
		p.Problem = err.Error()
		c.renderView(w, r, "deadletters", http.StatusBadRequest, view{Title: "dead letters", Data: p})
		return
	}
	f.Limit = letterLimit + 1
	// Served by the primary key, newest first, and (source, created_at)
	// for a source.
	ds, err := c.admin.ListDeadLetters(r.Context(), f)
	if err != nil {
		p.Problem = err.Error()
		c.renderView(w, r, "deadletters", http.StatusBadRequest, view{Title: "dead letters", Data: p})
		return
	}
	if len(ds) > letterLimit {
		ds, p.Limited = ds[:letterLimit], true
	}
	p.Letters = ds
	c.renderView(w, r, "deadletters", http.StatusOK, view{Title: "dead letters", Data: p})
}

type letterPage struct {
	Letter      admin.DeadLetter
	Payload     string
	PayloadJSON bool
	Headers     string
}

func (c *Console) deadLetter(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		c.fail(w, r, http.StatusBadRequest, fmt.Errorf("%q is not a dead-letter id", r.PathValue("id")))
		return
	}
	d, err := c.admin.DeadLetterByID(r.Context(), id)
	if errors.Is(err, admin.ErrNotFound) {
		c.fail(w, r, http.StatusNotFound, err)
		return
	}
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	p := letterPage{Letter: d}
	p.Payload, p.PayloadJSON = prettyJSON(d.Payload)
	p.Headers, _ = prettyJSON(d.Headers)
	c.renderView(w, r, "deadletter", http.StatusOK, view{Title: fmt.Sprintf("dead letter %d", id), Nav: "deadletters", Data: p})
}

type resultsPage struct {
	Verb    string
	Results []admin.Result
	Done    int
	Error   string
	Back    string
}

// selection is the letters an action names: ids, or all=1 with the
// list's filter.
func selection(r *http.Request) (ids []int64, all bool, f admin.Filter, err error) {
	if err := r.ParseForm(); err != nil {
		return nil, false, f, fmt.Errorf("reading the form: %w", err)
	}
	if r.PostForm.Get("all") == "1" {
		f, err = letterFormOf(r.PostForm).filter()
		return nil, true, f, err
	}
	for _, s := range r.PostForm["id"] {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id <= 0 {
			return nil, false, f, fmt.Errorf("%q is not a dead-letter id", s)
		}
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return nil, false, f, errors.New("no dead letters selected")
	}
	return ids, false, f, nil
}

func (c *Console) retry(w http.ResponseWriter, r *http.Request) {
	ids, all, f, err := selection(r)
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), time.Minute)
	defer cancel()
	var rs []admin.Result
	if all {
		rs, err = c.admin.RetryMatching(ctx, f)
	} else {
		rs, err = c.admin.Retry(ctx, ids...)
	}
	c.results(w, r, "retried", rs, err)
}

func (c *Console) discard(w http.ResponseWriter, r *http.Request) {
	ids, all, f, err := selection(r)
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, err)
		return
	}
	note := strings.TrimSpace(r.PostForm.Get("note"))
	if note == "" {
		c.fail(w, r, http.StatusBadRequest, errors.New("a discard needs a note saying why"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), time.Minute)
	defer cancel()
	var rs []admin.Result
	if all {
		rs, err = c.admin.DiscardMatching(ctx, note, f)
	} else {
		rs, err = c.admin.Discard(ctx, note, ids...)
	}
	c.results(w, r, "discarded", rs, err)
}

func (c *Console) results(w http.ResponseWriter, r *http.Request, verb string, rs []admin.Result, err error) {
	p := resultsPage{Verb: verb, Results: rs, Back: c.cfg.BasePath + "/dead-letters"}
	for _, x := range rs {
		if x.Outcome != admin.Skipped {
			p.Done++
		}
	}
	status := http.StatusOK
	if err != nil {
		p.Error = err.Error()
		status = http.StatusInternalServerError
		if errors.Is(err, admin.ErrNotFound) {
			status = http.StatusNotFound
		}
	}
	c.renderView(w, r, "results", status, view{Title: verb, Nav: "deadletters", Data: p})
}
