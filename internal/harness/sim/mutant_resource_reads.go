//go:build leasehold_sim && mutant_resource_reads

package sim

// Mutant: the fenced resource checks tokens on writes only; a read for
// update neither checks nor raises the high-water.
func init() { fenceReads = false }
