package lessor

import "context"

// renewConfirm confirms leadership before a keepalive is answered (a seam:
// see seam_renew.go).
func renewConfirm(l *Lessor, ctx context.Context) error {
	return l.cfg.Confirmer.ConfirmLeadership(ctx)
}
