"""A batch of random ids shaped as the example builder's: to time or test a step without a corpus.

    synthetic_batch(batch_size, seq_len, vocab_size) -> {input_ids, input_mask, segment_ids}
"""

import numpy as np

from electra_jax.data.tokenizer import SPECIAL


def synthetic_batch(batch_size: int, seq_len: int, vocab_size: int, seed: int = 0) -> dict:
  """[CLS] tokens [SEP] tokens [SEP] with 5% of rows shorter, like the example builder's output."""
  rng = np.random.default_rng(seed)
  ids = rng.integers(5, vocab_size, (batch_size, seq_len), dtype=np.int32)
  lengths = np.where(rng.random(batch_size) < 0.05, rng.integers(5, seq_len, batch_size), seq_len)
  mask = (np.arange(seq_len)[None, :] < lengths[:, None]).astype(np.int32)
  half = lengths // 2
  segments = ((np.arange(seq_len)[None, :] > half[:, None]) & (mask > 0)).astype(np.int32)
  ids[:, 0] = SPECIAL.cls
  ids[np.arange(batch_size), half] = SPECIAL.sep
  ids[np.arange(batch_size), lengths - 1] = SPECIAL.sep
  ids = np.where(mask > 0, ids, SPECIAL.pad)
  return {'input_ids': ids, 'input_mask': mask, 'segment_ids': segments}
