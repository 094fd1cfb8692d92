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

  def close(self):
    self.manager.wait_until_finished()
    self.manager.close()
