"""Corpus -> tokenizer -> examples -> records -> tf.data -> global batches."""

import dataclasses
import os
import random
import shutil

import jax
import numpy as np
import pytest

from electra_jax.data import corpus as corpus_lib
from electra_jax.data import examples as examples_lib
from electra_jax.data import input_pipeline
from electra_jax.data import prepare as prepare_lib
from electra_jax.data import records
from electra_jax.data import tokenizer as tokenizer_lib
from electra_jax.train import partitioning

CLS, SEP = 2, 3


def _documents(num_docs, seed=0):
  """Documents of sentences of distinct ids: 1e6 * (doc + 1) + running index in the document."""
  rng = random.Random(seed)
  docs = []
  for d in range(num_docs):
    doc, counter = [], 0
    for _ in range(rng.randint(1, 30)):
      n = rng.randint(1, 40)
      doc.append([1_000_000 * (d + 1) + counter + i for i in range(n)])
      counter += n
    docs.append(doc)
  return docs


def _build(docs, max_length=128, seed=0):
  lines = []
  for doc in docs:
    lines.extend(doc)
    lines.append(None)
  return list(examples_lib.build_examples(lines, max_length, CLS, SEP, seed))


@pytest.fixture(scope='module')
def built():
  docs = _documents(1500)
  return docs, _build(docs)


@pytest.mark.fast
def test_examples_are_well_formed(built):
  _, examples = built
  for ex in examples:
    n = int(ex.input_mask.sum())
    assert (ex.input_mask[:n] == 1).all() and (ex.input_mask[n:] == 0).all()
    ids, seg = ex.input_ids[:n], ex.segment_ids[:n]
    assert ids[0] == CLS and ids[-1] == SEP
    assert (ex.input_ids[n:] == 0).all() and (ex.segment_ids[n:] == 0).all()
    seps = np.nonzero(ids == SEP)[0]
    assert len(seps) in (1, 2)
    first_sep = seps[0]
    assert (seg[:first_sep + 1] == 0).all() and (seg[first_sep + 1:] == 1).all()
    assert len(seps) == 1 or seps[1] == n - 1


@pytest.mark.fast
def test_examples_never_cross_documents_and_keep_order(built):
  _, examples = built
  for ex in examples:
    real = (ex.input_ids != CLS) & (ex.input_ids != SEP) & (ex.input_mask == 1)
    assert len(set(ex.input_ids[real] // 1_000_000)) == 1  # one document
    for segment in (0, 1):  # sentences keep their order within each segment
      ids = ex.input_ids[real & (ex.segment_ids == segment)]
      assert (np.diff(ids) > 0).all()


@pytest.mark.fast
def test_single_segment_and_short_example_shares(built):
  _, examples = built
  n = len(examples)
  single = np.mean([ex.segment_ids.sum() == 0 for ex in examples])
  # 10% single by the coin, plus examples whose only sentence(s) all went to A
  assert 0.10 <= single < 0.30, single
  # short targets: 5% of examples get a target in [5, 128]; full examples dominate
  full = np.mean([ex.input_mask.sum() == 128 for ex in examples])
  assert full > 0.4
  assert n > 1000


@pytest.mark.fast
def test_single_segment_coin_is_ten_percent():
  # one long document of one-token sentences: B is non-empty unless the 10% coin fires
  examples = _build([[[10 + i] for i in range(100_000)]], max_length=64)[:-1]
  single = np.mean([ex.segment_ids.sum() == 0 for ex in examples])
  assert abs(single - 0.10) < 3 * np.sqrt(0.1 * 0.9 / len(examples)), single
  lengths = np.array([ex.input_mask.sum() for ex in examples])
  short = np.mean(lengths < 64)
  assert 0.02 < short < 0.09, short  # about 5% of targets are random lengths in [5, 64]


@pytest.mark.fast
def test_builder_is_deterministic_for_a_seed(built):
  docs, examples = built
  again = _build(docs)
  assert all((a.input_ids == b.input_ids).all() for a, b in zip(examples, again))
  other = _build(docs, seed=1)
  assert any((a.input_ids != b.input_ids).any() for a, b in zip(examples, other))


def _pack(docs, max_length, min_piece=8):
  packer = examples_lib.DocumentPacker(max_length, CLS, SEP, min_piece=min_piece)
  rows = []
  for doc in docs:
    for sentence in doc:
      rows += packer.add_sentence(sentence)
    rows += packer.end_document()
  return rows + packer.flush()


@pytest.mark.fast
@pytest.mark.parametrize('max_length', [64, 512])
def test_packed_rows_hold_every_document_whole_in_order_and_full(max_length):
  """Each piece [CLS] tokens [SEP] of one document, numbered 1, 2, ... in its row; the pieces in
  order give back every token of every document; every row but the last is full but for a room
  smaller than a piece."""
  docs = _documents(300, seed=1) + [[[7_000_000 + i for i in range(3 * max_length)]]]
  rows = _pack(docs, max_length)
  tokens = []
  for r, row in enumerate(rows):
    assert row.input_ids.shape == (max_length,) and (row.segment_ids == 0).all()
    n = int((row.input_mask > 0).sum())
    assert (row.input_mask[n:] == 0).all() and (row.input_ids[n:] == 0).all()
    if r < len(rows) - 1:
      assert n > max_length - 2 - 8, (r, n)
    numbers = row.input_mask[:n]
    assert numbers[0] == 1 and set(np.diff(numbers)) <= {0, 1}
    for k in range(1, numbers.max() + 1):
      piece = row.input_ids[:n][numbers == k]
      assert piece[0] == CLS and piece[-1] == SEP and len(piece) > 2
      assert len(set(piece[1:-1] // 1_000_000)) == 1  # one document
      tokens += list(piece[1:-1])
  assert tokens == [t for doc in docs for sentence in doc for t in sentence]


@pytest.mark.fast
def test_sentence_splitting_of_documentation():
  text = 'First line of a\nparagraph. Second sentence!\n\n    code = 1\n    more()\n\nLast.'
  assert corpus_lib.text_to_sentences(text) == [
      'First line of a paragraph.', 'Second sentence!', 'code = 1', 'more()', 'Last.']


def test_builtin_corpus_is_about_two_megabytes():
  docs = corpus_lib.builtin_documents()
  size = sum(len(s) + 1 for d in docs for s in d)
  assert 1.0e6 < size < 4.0e6 and len(docs) > 300
  assert docs == corpus_lib.builtin_documents()[:len(docs)]


@pytest.mark.fast
def test_records_folder_and_metadata(records_dir):
  meta = records.read_metadata(records_dir)
  assert meta['max_seq_length'] == 32 and meta['vocab_size'] == 96
  assert meta['special_ids'] == {'pad': 0, 'unk': 1, 'cls': 2, 'sep': 3, 'mask': 4}
  for split in ('train', 'eval'):
    assert meta['splits'][split]['examples'] > 0
    for f in meta['splits'][split]['files']:
      assert os.path.getsize(os.path.join(records_dir, f)) > 0
  tok = tokenizer_lib.SentencePieceTokenizer(os.path.join(records_dir, records.VOCAB))
  assert tok.fingerprint == meta['vocab_fingerprint'] and tok.vocab_size == 96
  assert 0 < meta['unigram_xent'] < np.log(96)
  assert not [p for p in os.listdir(os.path.dirname(records_dir)) if p.startswith('.records')]


@pytest.mark.fast
def test_tokenizer_special_tokens_are_control_symbols(records_dir):
  tok = tokenizer_lib.SentencePieceTokenizer(os.path.join(records_dir, records.VOCAB))
  assert [tok.id_to_piece(i) for i in range(5)] == list(tokenizer_lib.SPECIAL_TOKENS)
  ids = tok.encode('the cat [MASK] sat [CLS]')
  assert not set(ids) & {0, 2, 3, 4}
  assert tok.decode(tok.encode('the cat sat')) == 'the cat sat'


@pytest.mark.fast
def test_unigram_cross_entropy():
  special = tokenizer_lib.SpecialIds(0, 1, 2, 3, 4)
  train = np.array([0, 0, 0, 0, 0, 9, 9, 0])  # add-one: 10, 10, 1 over 3 usable ids (+ unk)
  ev = np.array([5, 0, 5, 5, 0, 1, 1, 0])
  got = prepare_lib.unigram_cross_entropy(train, ev, special)
  p = np.array([1, 10, 10, 1]) / 22  # ids 1 (unk), 5, 6, 7
  assert got == pytest.approx(-(np.log(p[1]) + np.log(p[2])) / 2)


@pytest.mark.fast
def test_shards_that_disappear_while_read_are_one_sentence(records_dir, tmp_path):
  """A records folder deleted (or its bucket emptied) during a run: the shard named, and the fix
  (restore it, run the same command again), not TensorFlow's NotFoundError traceback."""
  copy = str(tmp_path / 'records')
  shutil.copytree(records_dir, copy)
  dataset = input_pipeline.make_dataset(copy, 'train', 16, seed=3, shuffle_buffer=50)
  for name in os.listdir(copy):
    if name.endswith('.tfrecord'):
      os.remove(os.path.join(copy, name))
  batches = input_pipeline.global_batches(dataset, partitioning.batch_sharding(
      partitioning.make_mesh()), copy)
  with pytest.raises(input_pipeline.DamagedRecords, match=(
      rf'^{copy}/train-\d+-of-\d+\.tfrecord can no longer be read \(gone: .*No such file.*\): the '
      f'records folder {copy} changed while the run read it; restore it \\(or rebuild it\\) and '
      'run the same command again to continue from the last checkpoint$')):
    next(batches)


@pytest.mark.fast
def test_pipeline_gives_sharded_deterministic_global_batches(records_dir):
  mesh = partitioning.make_mesh()
  sharding = partitioning.batch_sharding(mesh)
  take = lambda: next(input_pipeline.global_batches(
      input_pipeline.make_dataset(records_dir, 'train', 16, seed=3, shuffle_buffer=50),
      sharding))
  a, b = take(), take()
  assert a['input_ids'].shape == (16, 32) and a['input_ids'].dtype == np.int32
  assert a['input_ids'].sharding == sharding and len(a['input_ids'].addressable_shards) == 8
  for k in a:
    np.testing.assert_array_equal(a[k], b[k])
  c = next(input_pipeline.global_batches(
      input_pipeline.make_dataset(records_dir, 'train', 16, seed=4, shuffle_buffer=50), sharding))
  assert (np.asarray(a['input_ids']) != np.asarray(c['input_ids'])).any()


@pytest.mark.fast
def test_prepare_refuses_a_foreign_folder_an_empty_corpus_and_other_settings(tmp_path,
                                                                             records_dir):
  settings, _ = records.read_plan(os.path.join(records_dir, records.PLAN))
  (tmp_path / 'busy').mkdir()
  (tmp_path / 'busy' / 'notes.txt').write_text('mine')
  with pytest.raises(ValueError, match='exists and is not a records folder'):
    prepare_lib.records_folder(settings, str(tmp_path / 'busy'), log=lambda *_: None)
  assert os.listdir(tmp_path / 'busy') == ['notes.txt']
  (tmp_path / 'empty.txt').write_text('\n\n  \n')
  empty = records.Settings(source=str(tmp_path / 'empty.txt'), max_seq_length=32)
  with pytest.raises(ValueError, match='holds no text'):
    prepare_lib.records_folder(empty, str(tmp_path / 'r'), log=lambda *_: None)
  assert not os.path.exists(tmp_path / 'r')
  other = dataclasses.replace(settings, max_seq_length=64)
  with pytest.raises(ValueError, match=r'other settings \(max_seq_length 32 -> 64\)'):
    prepare_lib.records_folder(other, records_dir, log=lambda *_: None)
  logged = []
  assert prepare_lib.records_folder(settings, records_dir, log=logged.append) == \
      records.read_metadata(records_dir)
  assert logged == [f'records {records_dir}: complete already']


@pytest.mark.fast
def test_missing_corpus_fails_early(tmp_path):
  with pytest.raises(FileNotFoundError, match='matches no file'):
    corpus_lib.resolve_files(str(tmp_path / 'nothing*.txt'))
  assert jax.device_count() == 8
