package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/llmq/llmq"
	"github.com/llmq/llmq/store"
)

// The admin API's models (docs/design/tenants.md#models-as-data): each
// model's limits, context window, prices and fallbacks as rows, with the
// tenants' ETag / If-Match and audit log. Every worker moves its lanes to
// a model's new limits within 2 s.

// CodeUnknownModel: a model's fallback names no model held.
const CodeUnknownModel = "unknown_model"

// AdminModel is a model of the admin API: its settings (0: unknown or
// none, as in the configuration) and version (the ETag).
type AdminModel struct {
	Name string `json:"name"`
	llmq.Model
	Version   int64     `json:"version"`
	UpdatedAt time.Time `json:"updated_at"`
}

func adminModel(m store.ModelRow) AdminModel {
	return AdminModel{Name: m.Name, Model: m.Model, Version: m.Version, UpdatedAt: m.UpdatedAt}
}

// modelRowStore holds the models.
type modelRowStore interface {
	Load(ctx context.Context) (*store.TenancyRows, error)
	Model(ctx context.Context, name string) (store.ModelRow, error)
	PutModel(ctx context.Context, actor string, row store.ModelRow, version int64) (store.ModelRow, error)
	DeleteModel(ctx context.Context, actor, name string, version int64) error
}

// modelAdmin serves the admin API's models (operator keys only).
type modelAdmin struct {
	replies
	store modelRowStore
}

// getModel: GET /v1/admin/models/{model}.
func (ma *modelAdmin) getModel(w http.ResponseWriter, r *http.Request) {
	m, err := ma.store.Model(r.Context(), r.PathValue("model"))
	ma.writeModel(w, r, http.StatusOK, m, err)
}

// listModels: GET /v1/admin/models.
func (ma *modelAdmin) listModels(w http.ResponseWriter, r *http.Request) {
	rows, err := ma.store.Load(r.Context())
	if err != nil {
		ma.internalError(w, r, err)
		return
	}
	out := make([]AdminModel, len(rows.Models))
	for i, m := range rows.Models {
		out[i] = adminModel(m)
	}
	writeJSON(w, http.StatusOK, struct {
		Data []AdminModel `json:"data"`
	}{out})
}

func (ma *modelAdmin) writeModel(w http.ResponseWriter, r *http.Request, status int, m store.ModelRow, err error) {
	if err != nil {
		ma.modelError(w, r, err, m.Name)
		return
	}
	w.Header().Set("ETag", etag(m.Version))
	writeJSON(w, status, adminModel(m))
}

// putModel: POST /v1/admin/models (name "": the body names it; it must
// be new) and PUT /v1/admin/models/{model} (If-Match required).
func (ma *modelAdmin) putModel(w http.ResponseWriter, r *http.Request, name string) {
	version, status := int64(-1), http.StatusCreated
	if name != "" {
		v, ok := ifMatch(w, r)
		if !ok {
			return
		}
		version, status = v, http.StatusOK
	}
	var b struct {
		Name string `json:"name"`
		llmq.Model
	}
	if !decodeAdmin(w, r, &b, "a model") {
		return
	}
	switch {
	case name == "" && !llmq.ValidModelName(b.Name):
		writeError(w, http.StatusBadRequest, Error{Code: llmq.CodeInvalidValue, Field: "name",
			Message: fmt.Sprintf("a model name is 1-%d characters, without spaces", llmq.MaxModelNameLength)})
		return
	case name != "" && b.Name != "" && b.Name != name:
		writeError(w, http.StatusBadRequest, Error{Code: llmq.CodeInvalidValue, Field: "name",
			Message: fmt.Sprintf("a model is not renamed: omit name or send %q", name)})
		return
	case name == "":
		name = b.Name
	}
	m, err := ma.store.PutModel(r.Context(), actor(r), store.ModelRow{Name: name, Model: b.Model}, version)
	m.Name = name
	ma.writeModel(w, r, status, m, err)
}

// deleteModel: DELETE /v1/admin/models/{model}, If-Match required.
func (ma *modelAdmin) deleteModel(w http.ResponseWriter, r *http.Request) {
	version, ok := ifMatch(w, r)
	if !ok {
		return
	}
	name := r.PathValue("model")
	if err := ma.store.DeleteModel(r.Context(), actor(r), name, version); err != nil {
		ma.modelError(w, r, err, name)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// modelError answers a store error of the models: a *store.ModelsError
// is 400 naming the fields of the model written (a deletion that another
// model's fallbacks forbid: 409 naming name).
func (ma *modelAdmin) modelError(w http.ResponseWriter, r *http.Request, err error, name string) {
	me, ok := errors.AsType[*store.ModelsError](err)
	if !ok {
		ma.tenancyError(w, r, err, "model")
		return
	}
	details := make([]llmq.FieldError, 0, len(me.Errs))
	for _, e := range me.Errs {
		code := llmq.CodeInvalidValue
		if errors.Is(e, llmq.ErrUnknownModel) {
			code = CodeUnknownModel
		}
		field, msg, _ := strings.Cut(e.Error(), ": ")
		if f, own := strings.CutPrefix(field, "models."+name+"."); own {
			field = f
		} else {
			field, msg = "name", e.Error()
		}
		details = append(details, llmq.FieldError{Field: field, Code: code, Message: msg})
	}
	status := http.StatusBadRequest
	if r.Method == http.MethodDelete {
		status = http.StatusConflict
	}
	writeError(w, status, Error{Code: details[0].Code, Field: details[0].Field, Message: details[0].Message, Details: details})
}

// decodeAdmin decodes an admin body into v, unknown fields refused; every
// error names its field.
func decodeAdmin(w http.ResponseWriter, r *http.Request, v any, what string) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		return true
	}
	e := Error{Code: llmq.CodeInvalidJSON, Message: "the body is not " + what + ": " + err.Error()}
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		e = Error{Code: llmq.CodeInvalidType, Field: strings.TrimPrefix(te.Field, "Model."), Message: fmt.Sprintf("must be of type %s", te.Type)}
	} else if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		e = Error{Code: llmq.CodeInvalidValue, Field: strings.Trim(f, `"`), Message: "no such setting"}
	}
	writeError(w, http.StatusBadRequest, e)
	return false
}
