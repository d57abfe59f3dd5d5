// Package results is fetch's results format: the record written for each
// URL line a run takes (Record, its tries, phases and error), its JSON
// lines encoding (JSONLWriter, written byte for byte as encoding/json
// would), and reading records back for --resume (LoadDone, DoneSet,
// RepairTail) and for a summary (KeyReader, Unmarshal). It is its own
// package so that the engine, the report and the command share one
// definition of a record, and so that reading results needs no engine.
package results
