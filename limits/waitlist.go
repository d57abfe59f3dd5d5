package limits

type waiter struct {
	req   Request
	ch    chan *Lease // buffered 1: the grant, or nil with err (or closed)
	err   error       // why nil was sent, when not ErrClosed
	prev  *waiter
	next  *waiter
	added bool
}

// waitList is an intrusive FIFO list of waiters.
type waitList struct{ head, tail *waiter }

func (l *waitList) push(w *waiter) {
	w.added = true
	w.prev = l.tail
	if l.tail != nil {
		l.tail.next = w
	} else {
		l.head = w
	}
	l.tail = w
}

func (l *waitList) remove(w *waiter) {
	if !w.added {
		return
	}
	w.added = false
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		l.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		l.tail = w.prev
	}
	w.prev, w.next = nil, nil
}
