//go:build race

package report_test

// memoryRecords is how many records TestSummarize_memory streams: fewer
// under the race detector, which makes decoding JSON several times slower.
const memoryRecords = 200_000

// raceDetector: this test binary runs under the race detector, whose
// runtime changes what the heap holds; memory bounds are asserted by the
// run without it (scripts/test.sh runs the memory tests without -race).
const raceDetector = true
