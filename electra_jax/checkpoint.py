"""Checkpoints through Orbax: the train state plus a small JSON of facts about the run.

Each step is written to a temporary directory and renamed when complete (Orbax's atomicity), so a
crash never leaves a checkpoint that looks finished.
"""

import os

import jax
import orbax.checkpoint as ocp


class Checkpointer:
  """Saves and restores {state, meta} under `<workdir>/checkpoints/<step>`."""

  def __init__(self, directory: str, max_to_keep: int = 3):
    self.directory = os.path.abspath(directory)
    self.manager = ocp.CheckpointManager(
        self.directory, item_names=('state', 'meta'),
        options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True))

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def save(self, step: int, state, meta: dict):
    self.manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                                    meta=ocp.args.JsonSave(meta)))

  def restore(self, step: int, target_state):
    """Restores onto `target_state`'s structure, shapes, dtypes and shardings."""
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, target_state)
    out = self.manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore()))
    return out['state'], out['meta']

  def restore_latest(self, target_state, log=print):
    """(step, state, meta) of the newest checkpoint that reads back whole; (0, target, {}) if none.

    Raises ValueError when checkpoints exist but none can be read.

    A damaged checkpoint (a truncated or missing file) is reported and the one before it is used;
    it is left on disk for inspection and leaves the rotation with the next saves.
    """
    for step in sorted(self.manager.all_steps(), reverse=True):
      try:
        state, meta = self.restore(step, target_state)
        return step, state, meta
      except Exception as e:  # pylint: disable=broad-except
        reason = ' '.join(str(e).split())[:200]
        log(f'warning: checkpoint {self.directory}/{step} cannot be read ({type(e).__name__}: '
            f'{reason}); trying the one before it')
    if self.manager.all_steps():
      raise ValueError(f'no checkpoint in {self.directory} can be read (see the warnings above); '
                       'if the config changed, use the one of the run, else move the folder away '
                       'to start afresh')
    return 0, target_state, {}

  def close(self):
    self.manager.wait_until_finished()
    self.manager.close()
