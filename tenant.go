package llmq

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
)

// WeightDefault is the weight of a tenant (or project) that sets none, and
// of every tenant the configuration does not list.
const WeightDefault = 1

// Scope is what the configuration says of one tenant or one project: its
// weight in the fair share of a provider quota and its own quota layer.
// docs/design/tenants.md. A zero field means the default, as each comment
// says.
type Scope struct {
	// Weight is the scope's share of a binding provider quota relative to
	// the other backlogged tenants (a tenant of weight 3 gets three times
	// the tokens of a tenant of weight 1); 0 = WeightDefault. Between
	// projects it is not used yet: a tenant's jobs share its turn in claim
	// order.
	Weight float64 `yaml:"weight" json:"weight,omitempty"`
	// Priority is the highest priority the scope's jobs are ordered at: a
	// job asking for more is claimed as if it asked for this one. "" = no
	// cap.
	Priority Priority `yaml:"priority" json:"priority,omitempty"`
	// RPM and TPM are the scope's requests and tokens per minute over all
	// its models; 0 = no limit.
	RPM float64 `yaml:"rpm" json:"rpm,omitempty"`
	TPM float64 `yaml:"tpm" json:"tpm,omitempty"`
	// Concurrency is the scope's calls in flight; 0 = no limit.
	Concurrency int `yaml:"concurrency" json:"concurrency,omitempty"`
	// DailyCost and MonthlyCost are the scope's budgets in USD per UTC day
	// and month (budget.go); 0 = none.
	DailyCost   float64 `yaml:"daily_cost" json:"daily_cost,omitempty"`
	MonthlyCost float64 `yaml:"monthly_cost" json:"monthly_cost,omitempty"`
	// Overage is what happens once a budget is spent; "" = a project's
	// tenant's policy, else OverageQueue.
	Overage Overage `yaml:"overage" json:"overage,omitempty"`
	// OutputCap is the output allowance (max_tokens) of the scope's calls
	// past BudgetHoldAt of a budget; 0 = a project's tenant's, else
	// OutputCapDefault.
	OutputCap int `yaml:"output_cap" json:"output_cap,omitempty"`
	// SoftDepth and HardDepth are the most jobs the scope may hold waiting
	// or in flight before it is throttled, then refused
	// (docs/design/admission.md); 0 = a tenant's weighted share of the
	// queue's soft and hard depth, a project's tenant's (no limit of its
	// own).
	SoftDepth int64 `yaml:"soft_depth" json:"soft_depth,omitempty"`
	HardDepth int64 `yaml:"hard_depth" json:"hard_depth,omitempty"`
	// Paused holds the scope's queued jobs: none is claimed (waiting
	// reason paused) and the gateway refuses its calls with 429, until it
	// is resumed. false = running.
	Paused bool `yaml:"paused" json:"paused,omitempty"`
}

// Tenant is a tenant's scope and those of its projects.
type Tenant struct {
	Scope `yaml:",inline"`
	// Projects are the tenant's projects by name (a job's project field).
	// A tenant that lists projects takes jobs of those only (CheckProject).
	Projects map[string]Scope `yaml:"projects" json:"projects,omitempty"`
	// AllowUnknownProjects lets the tenant's jobs name projects Projects
	// does not list: they count against the tenant's limits and budgets
	// only. false = such a job is refused.
	AllowUnknownProjects bool `yaml:"allow_unknown_projects" json:"allow_unknown_projects,omitempty"`
}

// CodeUnknownProject is the field error code of a project its tenant's
// configuration does not list.
const CodeUnknownProject = "unknown_project"

// maxProjectsNamed bounds the projects an error lists.
const maxProjectsNamed = 10

// CheckProject returns a field error (project) when j names a project its
// tenant does not list while listing others, unless the tenant allows
// unknown projects: such a job would pass none of the project limits,
// budgets and priority cap the operator set. A tenant that lists no
// project, or a job that names none, has only the tenant's to pass.
func (ts Tenants) CheckProject(j *Job) []FieldError {
	t := ts[j.Tenant]
	if j.Project == "" || len(t.Projects) == 0 || t.AllowUnknownProjects {
		return nil
	}
	if _, ok := t.Projects[j.Project]; ok {
		return nil
	}
	names := slices.Sorted(maps.Keys(t.Projects))
	known := strings.Join(names[:min(len(names), maxProjectsNamed)], ", ")
	if n := len(names); n > maxProjectsNamed {
		known += fmt.Sprintf(", and %d more", n-maxProjectsNamed)
	}
	return []FieldError{{Field: "project", Code: CodeUnknownProject,
		Message: fmt.Sprintf("tenant %q has no project %.64q; its projects: %s", j.Tenant, j.Project, known)}}
}

// Tenants are the configured tenants by name. The zero value lists none:
// every tenant has WeightDefault and no quota of its own.
type Tenants map[string]Tenant

// Weight is tenant's weight: its configured one, else WeightDefault.
func (ts Tenants) Weight(tenant string) float64 {
	if w := ts[tenant].Weight; w > 0 {
		return w
	}
	return WeightDefault
}

// Paused reports whether tenant, or its project (when project is not
// ""), is paused: its jobs are not claimed.
func (ts Tenants) Paused(tenant, project string) bool {
	t, ok := ts[tenant]
	return ok && (t.Paused || (project != "" && t.Projects[project].Paused))
}

// Priority is the priority j is ordered at: its own, lowered to its
// tenant's cap and to its project's.
func (ts Tenants) Priority(j *Job) Priority {
	p := j.Priority
	t, ok := ts[j.Tenant]
	if !ok {
		return p
	}
	for _, c := range []Priority{t.Priority, t.Projects[j.Project].Priority} {
		if c != "" && c.Rank() > p.Rank() {
			p = c
		}
	}
	return p
}

// Validate checks every scope; each error names the setting under prefix
// ("tenants").
func (ts Tenants) Validate(prefix string) []error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(ts)) {
		t := ts[name]
		p := prefix + "." + name
		if !validID(name) {
			errs = append(errs, fmt.Errorf("%s: a tenant is 1-%d characters of [A-Za-z0-9._:-]", p, MaxIDLength))
		}
		errs = append(errs, t.Scope.validate(p)...)
		for _, proj := range slices.Sorted(maps.Keys(t.Projects)) {
			pp := p + ".projects." + proj
			if !validID(proj) {
				errs = append(errs, fmt.Errorf("%s: a project is 1-%d characters of [A-Za-z0-9._:-]", pp, MaxIDLength))
			}
			errs = append(errs, t.Projects[proj].validate(pp)...)
		}
	}
	return errs
}

func (s Scope) validate(p string) []error {
	var errs []error
	for _, f := range []struct {
		name string
		v    float64
	}{{"weight", s.Weight}, {"rpm", s.RPM}, {"tpm", s.TPM}, {"concurrency", float64(s.Concurrency)}} {
		if !(f.v >= 0 && f.v < math.Inf(1)) {
			errs = append(errs, fmt.Errorf("%s.%s: must be a finite number, not negative (0: the default); got %v", p, f.name, f.v))
		}
	}
	if s.SoftDepth < 0 || s.HardDepth < 0 {
		errs = append(errs, fmt.Errorf("%s: soft_depth and hard_depth must not be negative (0: the default)", p))
	}
	if s.HardDepth > 0 && s.SoftDepth >= s.HardDepth {
		errs = append(errs, fmt.Errorf("%s.hard_depth: must exceed soft_depth (%d); got %d", p, s.SoftDepth, s.HardDepth))
	}
	if s.Priority != "" && !s.Priority.Valid() {
		errs = append(errs, fmt.Errorf("%s.priority: %q: want high, normal or low", p, s.Priority))
	}
	return append(errs, s.validateBudget(p)...)
}

// ShareOf is the part of a capacity shared by weight (the queue's depth)
// of a tenant of weight w, when the tenants holding jobs weigh total
// together, itself included when it holds any: w/total, and never more
// than w/(w+WeightDefault), so that a tenant alone leaves room for one more
// (docs/design/admission.md).
func ShareOf(w, total float64) float64 { return w / max(total, w+WeightDefault) }
