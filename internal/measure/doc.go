// Package measure holds what the demo (cmd/rlock-demo) and the bench module
// (bench/) share to compare locks: a rueidis.Client wrapper that counts the
// requests a lock sends, the SET NX spin lock every peer is measured against,
// and the statistics both report (percentiles, Jain's fairness index).
//
// It is internal: its API follows what those two programs need, nothing more.
package measure
