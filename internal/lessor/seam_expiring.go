package lessor

// refuseExpiring: a session whose Expire was proposed is not renewed until
// the proposal is known not to have applied (a seam: see seam_renew.go).
const refuseExpiring = true
