"""Token tagging: CoNLL files, BIOES tags, and entity-level precision / recall / F1.

A chunk (an entity, a phrase) is read from tags the way conlleval reads them: B-X or S-X starts one,
I-X or E-X continues one of type X (an I-X after O or after another type starts one, as IOB1 files
have it), E-X and S-X end one. Files in IOB1, IOB2 or BIOES all become BIOES.
"""


from electra_jax import fs


def read_conll(path: str, column: int = -1) -> list[tuple[tuple, tuple]]:
  """(words, tags) per sentence of a CoNLL file: one token per line, its tag in `column`, a blank
  line between sentences, -DOCSTART- lines skipped."""
  if not fs.isfile(path):
    raise FileNotFoundError(f'the data file {path} does not exist; give a CoNLL file (one token '
                            'and its tag per line, a blank line between sentences)')
  sentences, words, tags = [], [], []
  with fs.open(path, encoding='utf-8') as f:
    for n, line in enumerate(f, start=1):
      parts = line.split()
      if not parts or parts[0] == '-DOCSTART-':
        if words:
          sentences.append((tuple(words), tuple(tags)))
          words, tags = [], []
        continue
      if len(parts) < 2:
        raise ValueError(f'line {n} of {path} has no tag column ({line.strip()!r}); a CoNLL line '
                         'is a token and its tag, separated by spaces')
      words.append(parts[0])
      tags.append(parts[column])
  if words:
    sentences.append((tuple(words), tuple(tags)))
  if not sentences:
    raise ValueError(f'the data file {path} holds no sentences')
  return sentences


def _split(tag: str) -> tuple[str, str]:
  if tag == 'O' or '-' not in tag:
    return 'O', ''
  prefix, kind = tag.split('-', 1)
  return prefix, kind


def chunks(tags) -> list[tuple[int, int, str]]:
  """(start, end inclusive, type) of every chunk in a tag sequence (IOB1, IOB2 or BIOES)."""
  out, start, kind = [], None, None
  for i, tag in enumerate(list(tags) + ['O']):
    prefix, t = _split(tag)
    continues = prefix in ('I', 'E') and start is not None and t == kind
    if start is not None and not continues:
      out.append((start, i - 1, kind))
      start = kind = None
    if prefix in ('B', 'S') or (prefix in ('I', 'E') and start is None):
      start, kind = i, t
    if prefix in ('E', 'S') and start is not None:
      out.append((start, i, kind))
      start = kind = None
  return out


def to_bioes(tags) -> tuple:
  """The same chunks written as S-X (one token) or B-X I-X ... E-X; O elsewhere."""
  out = ['O'] * len(tags)
  for start, end, kind in chunks(tags):
    if start == end:
      out[start] = f'S-{kind}'
    else:
      out[start], out[end] = f'B-{kind}', f'E-{kind}'
      for i in range(start + 1, end):
        out[i] = f'I-{kind}'
  return tuple(out)


def entity_scores(gold: list, predicted: list) -> dict[str, float]:
  """Chunk-level precision, recall and F1 (micro, over all sentences), as conlleval counts them."""
  found = correct = wanted = 0
  for g, p in zip(gold, predicted):
    g, p = set(chunks(g)), set(chunks(p))
    found, wanted, correct = found + len(p), wanted + len(g), correct + len(g & p)
  precision = correct / found if found else 0.0
  recall = correct / wanted if wanted else 0.0
  f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
  return {'precision': precision, 'recall': recall, 'f1': f1}
