package workqueue_test

import (
	"context"
	"os"
	"testing"

	"github.com/fetch-dev/fetch/fetch/workqueue"
	redislimits "github.com/fetch-dev/fetch/limits/redis"
	"github.com/fetch-dev/fetch/limits/redis/redistest"
)

// TestQueue_cluster: on a Redis Cluster of 3 masters, reached as fetch
// reaches one (its nodes' URLs), the queue's scripts run (every key of a
// namespace in one slot): two workers drain what was enqueued, and status
// counts it.
func TestQueue_cluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	target, err := redislimits.ParseTarget(cl.URLs, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	if target.Kind != redislimits.KindCluster {
		t.Fatalf("target kind %v, want a cluster", target.Kind)
	}
	c, err := redislimits.Dial(context.Background(), target)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	q := workqueue.New(c, "cl")
	enqueue(t, q, "a", list(100))
	a := newWorker(t, q, workqueue.WorkerOptions{Batch: 8})
	b := newWorker(t, q, workqueue.WorkerOptions{Batch: 8})
	done := make(chan map[string]int)
	go func() { done <- drain(t, a) }()
	got := drain(t, b)
	for k, n := range <-done {
		got[k] += n
	}
	if len(got) != 100 {
		t.Errorf("the workers took %d lines, want 100", len(got))
	}
	for k, n := range got {
		if n != 1 {
			t.Errorf("%s taken %d times", k, n)
		}
	}
	if st := status(t, q); st.Enqueued != 100 || st.Done != 100 || st.Pending != 0 || st.Workers != 2 {
		t.Errorf("status: %+v", st)
	}
}
