package console

import (
	"fmt"
	"net/http"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"lehr.dev/lehr/proto/lehrpb"
)

// The propagation page: how long updates took from their publish to every
// subscribed host (GetPropagationStatus, measured by control/propagation),
// as a distribution per size class and per number of subscribed hosts,
// the share that met its class's objective, and the recent updates.

// propagationShown bounds the recent updates the page lists.
const propagationShown = 100

type propagationPage struct {
	Status *lehrpb.PropagationStatus
	// Classes and Buckets are Status's groups by size class and by
	// subscriber bucket; Objective the objective of each size class.
	Classes, Buckets []*lehrpb.PropagationGroup
	Objective        map[string]*durationpb.Duration
	Updates          []*lehrpb.PropagationUpdate
}

func (c *Console) propagation(w http.ResponseWriter, r *http.Request) {
	st, err := c.opts.Client.GetPropagationStatus(r.Context(), &lehrpb.GetPropagationStatusRequest{})
	if err != nil {
		c.failAPI(w, r, "propagation status", err)
		return
	}
	pp := propagationPage{Status: st, Objective: map[string]*durationpb.Duration{}}
	for _, cl := range st.GetClasses() {
		pp.Objective[cl.GetSizeClass()] = cl.GetObjective()
	}
	for _, g := range st.GetGroups() {
		if g.GetSizeClass() != "" {
			pp.Classes = append(pp.Classes, g)
		} else {
			pp.Buckets = append(pp.Buckets, g)
		}
	}
	pp.Updates = st.GetUpdates()[:min(len(st.GetUpdates()), propagationShown)]
	doc := map[string]any{"page": "propagation", "status": pj(st)}
	c.render(w, r, "propagation", page{Title: "Propagation", Crumbs: []crumb{{"Fleet", Prefix}},
		Refresh: int(c.opts.Refresh / time.Second), Body: pp}, doc)
}

// fmtSeconds is how the console shows a propagation time: seconds, to a
// tenth; "—" for none.
func fmtSeconds(d *durationpb.Duration) string {
	if d == nil {
		return "—"
	}
	return fmt.Sprintf("%.1f s", d.AsDuration().Seconds())
}

// share is met of count as a whole percentage; "—" for none.
func share(met, count int32) string {
	if count == 0 {
		return "—"
	}
	return fmt.Sprintf("%d%%", met*100/count)
}
