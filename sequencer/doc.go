// Package sequencer is leasehold's signed proof of a grant, which a protected resource can
// verify offline (Chubby's sequencer, signed).
//
// A fencing token alone is a bare integer: anyone who can reach the resource can send a huge
// one and fence every honest holder out of a key for good, and a holder of lock A can fence
// out a key protected by lock B. A Sequencer binds the token to the lock it was granted for,
// to the session that holds it and to the cluster that granted it, and is signed by the
// cluster with Ed25519:
//
//	grantor (Signer, private keys) ──grant + signed sequencer──▶ holder ──sequencer──▶ resource
//	                                                                                     │
//	     key set file (public keys, pinned) ───────────────────────────────────▶ Verifier: signature,
//	                                                                             key id, cluster id,
//	                                                                             expected lock name
//
// A resource refuses a sequencer that does not verify BEFORE it looks at the token, so a
// forged or altered sequencer can never raise the key's last accepted token.
//
// # Wire format (version 2)
//
// The binary form is canonical — one Sequencer has exactly one encoding, and decoding
// anything else fails with ErrMalformed — and all integers are big-endian:
//
//	1 byte        version (2)
//	1 byte + n    key id         (1..MaxIDLen bytes of printable ASCII)
//	1 byte + n    cluster id     (1..MaxIDLen bytes of printable ASCII)
//	2 bytes + n   lock name      (1..MaxNameLen bytes of UTF-8, no control characters)
//	8 bytes       token          (> 0)
//	1 byte + n    lease id       (0..MaxIDLen bytes of printable ASCII)
//	8 bytes       issued at      (Unix milliseconds, >= 0)
//	1 byte + n    group          (0..MaxIDLen bytes of printable ASCII; a routing hint)
//	1 byte        mode           (0 exclusive, 1 shared)
//	4 bytes       slot           (a semaphore's permit; 0 when shared)
//	64 bytes      Ed25519 signature of "leasehold-sequencer\x00" followed by every byte above
//
// Version 1 had no mode and no slot, so a reader's grant passed for the writer's and one
// slot's for another's; it is refused with ErrVersion.
//
// The text form (for the Fencing-Sequencer HTTP header, environment variables, logs) is the
// binary form in unpadded base64url ([EncodeToString]); it is at most [MaxTextLen] bytes.
//
// # Keys
//
// A cluster signs with one active key at a time and publishes every key that may still have
// signed a live sequencer in a [KeySet] (a JSON file: cluster id, and per key its id, public
// key, creation time and an optional not-after time). A [Verifier] trusts a whole key set,
// so a key can be rotated without a flag day: publish the new key, start signing with it,
// and drop the old one once no sequencer signed by it can still be in use. A key whose
// not-after time has passed verifies only sequencers issued before that time.
//
// The group field names the Raft group that issued the grant. It is a routing hint for a
// cluster of several groups and is never compared: a sequencer names its lock, and the lock
// name is what a resource checks.
package sequencer
