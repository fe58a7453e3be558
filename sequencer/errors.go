package sequencer

import "errors"

// Sentinel errors. Every error of this package for one of these conditions wraps the sentinel;
// match them with errors.Is.
var (
	// ErrMalformed means the bytes or text are not a canonical version-1 sequencer (bad
	// base64url, wrong version, a field out of range, trailing bytes).
	ErrMalformed = errors.New("sequencer: malformed")

	// ErrBadSignature means the signature does not match the content: the sequencer was
	// forged or altered.
	ErrBadSignature = errors.New("sequencer: bad signature")

	// ErrUnknownKey means the sequencer names a key id that the verifier does not trust.
	ErrUnknownKey = errors.New("sequencer: unknown key")

	// ErrKeyRetired means the sequencer was issued after its key's not-after time.
	ErrKeyRetired = errors.New("sequencer: key retired")

	// ErrWrongCluster means the sequencer was issued by another cluster than the verifier's.
	ErrWrongCluster = errors.New("sequencer: wrong cluster")

	// ErrWrongLock means the sequencer was granted for another lock than the one the caller
	// expects for the resource.
	ErrWrongLock = errors.New("sequencer: wrong lock")

	// ErrInvalidKeySet means a key set (file, JSON, or keys given to NewSigner) is not
	// usable; the message names the reason.
	ErrInvalidKeySet = errors.New("sequencer: invalid key set")
)
