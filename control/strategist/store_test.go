package strategist

import "lehr.dev/lehr/control/store"

// The strategist runs on control's store.
var _ Store = (*store.Store)(nil)
