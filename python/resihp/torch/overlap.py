# SPDX-License-Identifier: BSD-3-Clause
"""Exchanging gradient buckets while backward still runs (see grads.py).

Armed before the backward of a step's last microbatch: a hook on each
parameter's gradient accumulator counts the bucket's parameters done; a
thread exchanges the buckets strictly in order (every replica must call the
same sequence), each as soon as it is complete. finish(), after backward,
releases what backward never touched (unused parameters) and the slots, and
waits. If an exchange comes back with reassigned microbatches, the thread
stops exchanging but still moves the remaining buckets' last microbatch into
the local sums, so that the retry starts from complete local sums.

CUDA. Backward runs its kernels from autograd's device thread, on the
stream of each operation's forward, and a hook runs when its kernel is
queued, not done. So each hook records an event on the stream it runs on,
and the thread works on the training thread's stream (taken at arm()),
first waiting there for the events of the bucket's parameters: the
bucket's accumulation is ordered after its gradients and before the work
the training thread queues later (the loss slot). prepare() copies to the
pinned wire synchronously, so the wire is complete before job.allreduce
reads it."""
import contextlib
import threading

import torch


class Overlap:
    def __init__(self, grads):
        self.g = grads
        self.armed = False
        self.owner = {}
        for bi, (_, _, idx) in enumerate(grads.buckets):
            for i in idx:
                self.owner[i] = bi
        # the accumulator nodes of the leaves; holding them keeps them the
        # ones every later graph uses
        self.nodes = []
        for i, p in enumerate(grads.params):
            node = p.expand_as(p).grad_fn.next_functions[0][0]
            node.register_hook(lambda gin, gout, i=i: self._done(i))
            self.nodes.append(node)
        self.cv = threading.Condition()
        self.cuda = grads.device.type == "cuda"

    def arm(self, job):
        with self.cv:
            self.left = [len(b[2]) for b in self.g.buckets]
            self.ready = [False] * len(self.g.buckets)
            self.seen = set()
            self.events = [[] for _ in self.g.buckets]
            self.result, self.error = None, None
            self.armed = True
        self.stream = (torch.cuda.current_stream(self.g.device)
                       if self.cuda else None)
        self.thread = threading.Thread(target=self._run, args=(job,),
                                       name="resihp-buckets", daemon=True)
        self.thread.start()

    def _done(self, i):
        if not self.armed or i in self.seen:
            return
        self.g.gather(i)
        ev = self._event()
        with self.cv:
            self.seen.add(i)
            b = self.owner[i]
            if ev is not None:
                self.events[b].append(ev)
            self.left[b] -= 1
            if self.left[b] == 0:
                self.ready[b] = True
                self.cv.notify()

    def _event(self):
        """On CUDA: an event after the work queued so far on this thread's
        current stream (autograd's, in a hook)."""
        if not self.cuda:
            return None
        ev = torch.cuda.Event()
        ev.record(torch.cuda.current_stream(self.g.device))
        return ev

    def _run(self, job):
        try:
            with (torch.cuda.stream(self.stream) if self.cuda else
                  contextlib.nullcontext()):
                self._buckets(job)
        except BaseException as e:  # handed to the training thread
            self.error = e

    def _buckets(self, job):
        g = self.g
        for bi, b in enumerate(g.buckets):
            with self.cv:
                while not self.ready[bi]:
                    self.cv.wait()
                events = self.events[bi]
            for ev in events:
                self.stream.wait_event(ev)
            g.prepare(b, True)
            if self.result is None:
                self.result = g.reduce(b, job)

    def finish(self):
        """After backward: the buckets' outcome (None or reassigned ids)."""
        with self.cv:
            for i in range(len(self.g.params)):
                if i not in self.seen:
                    self.g.gather(i)
                    self.seen.add(i)
                    ev = self._event()
                    if ev is not None:
                        self.events[self.owner[i]].append(ev)
            self.ready = [True] * len(self.ready)
            self.cv.notify()
        self.thread.join()
        self.armed = False
        if self.error is not None:
            raise self.error
        return self.result
