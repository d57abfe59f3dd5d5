//go:build race

package fetch_test

// memoryRecords is how many records TestSummarize_memory streams: fewer
// under the race detector, which makes decoding JSON several times slower.
const memoryRecords = 200_000
