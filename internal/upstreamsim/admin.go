package upstreamsim

import (
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"slices"
)

// LimitsUpdate is the body of POST /sim/limits and the answer of
// GET /sim/limits?model=NAME. In an update, zero fields keep the value in
// force.
type LimitsUpdate struct {
	// Model is the model whose limits change; "" or "*" is the default.
	Model string `json:"model"`
	Limits
}

func (s *Server) handleStats(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.Stats())
}

func (s *Server) handleReset(w http.ResponseWriter, _ *http.Request) {
	s.Reset()
	writeJSON(w, http.StatusOK, map[string]bool{"reset": true})
}

func (s *Server) handleGetLimits(w http.ResponseWriter, r *http.Request) {
	model := r.URL.Query().Get("model")
	writeJSON(w, http.StatusOK, LimitsUpdate{Model: model, Limits: s.Limits(model)})
}

func (s *Server) handleSetLimits(w http.ResponseWriter, r *http.Request) {
	var u LimitsUpdate
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err == nil {
		err = json.Unmarshal(body, &u)
	}
	if err == nil {
		err = u.Limits.validate("limits")
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, apiError{Message: err.Error(), Type: "invalid_request_error"})
		return
	}
	s.SetLimits(u.Model, u.Limits)
	writeJSON(w, http.StatusOK, LimitsUpdate{Model: u.Model, Limits: s.Limits(u.Model)})
}

type modelObject struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

func (s *Server) handleListModels(w http.ResponseWriter, _ *http.Request) {
	s.dialect.commonHeaders(w, newRequestID())
	names := slices.Sorted(maps.Keys(s.cfg.Models))
	data := make([]modelObject, 0, len(names))
	for _, n := range names {
		data = append(data, modelObject{ID: n, Object: "model", Created: s.born.Unix(), OwnedBy: "system"})
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

func (s *Server) handleGetModel(w http.ResponseWriter, r *http.Request) {
	s.dialect.commonHeaders(w, newRequestID())
	name := r.PathValue("model")
	if _, ok := s.limits.model(name); !ok {
		writeError(w, http.StatusNotFound, apiError{
			Message: "The model `" + name + "` does not exist or you do not have access to it.",
			Type:    "invalid_request_error",
			Code:    "model_not_found",
		})
		return
	}
	writeJSON(w, http.StatusOK, modelObject{ID: name, Object: "model", Created: s.born.Unix(), OwnedBy: "system"})
}
