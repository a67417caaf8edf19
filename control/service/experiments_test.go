package service

import "lehr.dev/lehr/control/store"

// The preview handlers run on control's store.
var _ previewStore = (*store.Store)(nil)
