//go:build !race

package report_test

// memoryRecords is how many records TestSummarize_memory streams.
const memoryRecords = 1_000_000

// raceDetector: see summarize_race_test.go.
const raceDetector = false
