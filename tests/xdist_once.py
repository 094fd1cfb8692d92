"""The test command's scheduler (`-n 2 --dist loadscope`, setup.cfg): pytest-xdist's load-scope
scheduling, except that a test whose worker died (a segmentation fault, or pytest-timeout ending
a stuck test) is reported failed once and not run again.

xdist puts the unit of tests a dead worker held back in its queue with the test that killed it
still pending, so a replacement worker runs that test again (one that crashes every time killed
worker after worker), and it could hand that replacement a single test while the other worker was
stopping: the run then waited forever with both workers idle. Here the crashed test counts as done
(xdist has reported it failed), the rest of its unit runs on another worker that holds enough work
to run it, and the run ends.

Through xdist's public hook `pytest_xdist_make_scheduler`; the scheduler's state it adjusts is
looked for first, and an xdist without it keeps its own scheduling.
"""

from xdist.scheduler import LoadScopeScheduling


class CrashedOnce(LoadScopeScheduling):
  """LoadScopeScheduling whose remove_node never re-queues the test that was running, and whose
  workers never wait for work that is queued."""

  def remove_node(self, node):
    workload = self.assigned_work.pop(node)
    pending = [(scope, test) for scope, unit in workload.items()
               for test, done in unit.items() if not done]
    if not pending:
      return None
    scope, crashed = pending[0]  # (the unit's tests run in order: the first not done was running)
    workload[scope][crashed] = True
    self.workqueue.update({s: unit for s, unit in workload.items() if not all(unit.values())})
    for other in self.assigned_work:
      self._reschedule(other)
    return crashed

  def _reschedule(self, node):
    """xdist's, and: a worker left with fewer than two tests while units wait is given another
    (a worker runs a test only once it holds the next one or is told to stop: the replacement of
    a dead worker, handed the one test left of its unit while the other worker was stopping, waited
    for ever), and one handed the last unit is told to stop."""
    if node.shutting_down:
      return
    if self.workqueue and self._pending_of(self.assigned_work[node]) <= 2:
      self._assign_work_unit(node)
    while self.workqueue and self._pending_of(self.assigned_work[node]) < 2:
      self._assign_work_unit(node)
    if not self.workqueue:
      node.shutdown()


def make_scheduler(config, log):
  """The hook's answer: CrashedOnce for --dist loadscope where this xdist's scheduler has the
  state it adjusts; None (xdist's own) otherwise."""
  if config.getvalue('dist') != 'loadscope':
    return None
  scheduler = CrashedOnce(config, log)
  state = ('assigned_work', 'workqueue', '_reschedule', '_pending_of')
  return scheduler if all(hasattr(scheduler, a) for a in state) else None
