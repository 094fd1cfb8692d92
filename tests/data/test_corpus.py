"""Reading corpus files: gzip, bytes that are not UTF-8, binary files, empty files, gigantic
lines."""

import gzip
import json
import os

import pytest

from electra_jax.data import corpus as corpus_lib
from electra_jax.data import prepare as prepare_lib
from electra_jax.data import records


def _read(pattern):
  report = corpus_lib.ReadReport()
  return list(corpus_lib.corpus_lines(pattern, report)), report


@pytest.mark.fast
def test_bad_utf8_is_replaced_and_counted(tmp_path):
  (tmp_path / 'a.txt').write_bytes(b'caf\xe9 au lait\nfine line\n\nsecond \xff\xfe doc\n')
  lines, report = _read(str(tmp_path / 'a.txt'))
  assert lines == ['caf\ufffd au lait', 'fine line', '', 'second \ufffd\ufffd doc', '']
  assert report.lines_with_bad_bytes == 2
  assert any('not UTF-8' in w for w in report.warnings())


@pytest.mark.fast
def test_binary_files_are_skipped_and_empty_files_add_nothing(tmp_path):
  (tmp_path / 'a.txt').write_text('one sentence.\n')
  (tmp_path / 'b.bin').write_bytes(bytes(range(256)) * 10)
  (tmp_path / 'c.txt').write_text('')
  with gzip.open(tmp_path / 'd.txt.gz', 'wt') as f:
    f.write('zipped sentence.\n')
  lines, report = _read(str(tmp_path))
  assert [l for l in lines if l] == ['one sentence.', 'zipped sentence.']
  assert report.skipped_binary == [f'{tmp_path / "b.bin"} (a NUL byte at byte 0, 10 in its first '
                                   '2,560 bytes: not text)'] and report.files == 3
  assert 'skipped 1 binary file(s)' in report.warnings()[0]


@pytest.mark.fast
def test_the_last_line_without_a_newline_is_read_whole_and_is_not_a_long_line(tmp_path):
  (tmp_path / 'a.txt').write_text('First line.\nThe last line has no newline.')
  lines, report = _read(str(tmp_path / 'a.txt'))
  assert lines == ['First line.', 'The last line has no newline.', '']
  assert report.long_lines_cut == 0 and report.warnings() == []


@pytest.mark.fast
def test_a_stray_nul_byte_in_text_is_dropped_and_named_and_a_binary_file_is_named(tmp_path):
  text = '\n'.join(f'Sentence number {i} about cats and dogs.' for i in range(300)) + '\n'
  raw = text.encode()
  (tmp_path / 'a.txt').write_bytes(raw[:5000] + b'\0' + raw[5000:])  # one NUL in 11 KB of text
  lines, report = _read(str(tmp_path / 'a.txt'))
  assert lines == text.splitlines() + [''] and not report.skipped_binary
  assert report.warnings() == [f'1 NUL byte(s) in text were dropped (the first at byte 5,000 of '
                               f'{tmp_path / "a.txt"})']
  (tmp_path / 'b.dat').write_bytes(b'text' + bytes(range(256)) * 4)
  source = corpus_lib.Source(str(tmp_path / 'b.dat'))
  with pytest.raises(ValueError, match=r"holds no text \(skipped as binary: .*b\.dat "
                     r"\(a NUL byte at "
                     r'byte 4, 4 in its first 1,028 bytes: not text\)\); give a corpus'):
    source.require_text()


@pytest.mark.fast
def test_a_gigantic_line_is_cut_into_bounded_pieces_without_losing_text(tmp_path):
  words = ' '.join(f'w{i}' for i in range(120_000))  # ~800K characters on one line
  wide = '\u00e9' * 250_000  # 500K bytes of 2-byte characters, no space at all
  (tmp_path / 'big.txt').write_text(words + '\n' + wide + '\nafter\n', encoding='utf-8')
  lines, report = _read(str(tmp_path / 'big.txt'))
  assert max(len(l.encode()) for l in lines) <= corpus_lib.MAX_LINE_BYTES
  assert report.long_lines_cut > 0 and report.lines_with_bad_bytes == 0
  assert lines[-2:] == ['after', '']
  pieces = lines[:-2]
  split = next(i for i, p in enumerate(pieces) if p.startswith('\u00e9'))
  assert ' '.join(pieces[:split]) == words  # cut at spaces: every word kept whole
  assert ''.join(pieces[split:]) == wide  # cut between characters, never inside one


@pytest.mark.fast
def test_one_long_line_is_read_in_bounded_documents_about_once_by_its_parts(tmp_path):
  """A 3 MB line without a space or a newline (the case of a 50 MB one: 5 GB of memory and 16x
  the file read): documents of at most MAX_DOCUMENT_CHARS, all at the line's start (one split for
  all of them), and its parts together read about the file twice, not once per part."""
  (tmp_path / 'one.txt').write_bytes(b'ab' * 1_500_000 + b'\n\nAnother document.\n')
  source = corpus_lib.Source(str(tmp_path / 'one.txt'))
  parts = source.parts(16)
  assert len(parts) > 30
  report, read = corpus_lib.ReadReport(), []
  for part in parts:
    read += list(source.part_documents(part, report))
  sizes = [sum(map(len, doc)) for _, doc in read]
  assert len(read) == 4 and max(sizes) <= corpus_lib.MAX_DOCUMENT_CHARS + corpus_lib.MAX_LINE_BYTES
  assert [start for start, _ in read] == [0, 0, 0, 3_000_002] and sum(sizes[:3]) == 3_000_000
  assert report.long_documents_cut == 2 and [doc for _, doc in read] == list(source.documents())
  assert report.bytes_read <= 2.2 * os.path.getsize(tmp_path / 'one.txt'), report.bytes_read


@pytest.mark.fast
def test_a_line_cut_just_before_its_newline_does_not_end_the_document(tmp_path):
  word = 'a' * (corpus_lib.MAX_LINE_BYTES - 1)  # + a space: the cut leaves only the newline
  (tmp_path / 'edge.txt').write_text(f'{word} \nnext\n\nnew doc\n')
  lines, report = _read(str(tmp_path / 'edge.txt'))
  assert lines[:-4] == [word] and report.long_lines_cut == 1
  assert lines[-4:] == ['next', '', 'new doc', '']


@pytest.mark.fast
def test_records_report_skipped_and_replaced_input(tmp_path):
  folder = tmp_path / 'corpus'
  folder.mkdir()
  text = '\n\n'.join('\n'.join(f'Sentence {d} {s} about cats and dogs.' for s in range(6))
                     for d in range(30))
  (folder / 'a.txt').write_bytes(text.encode() + b'\nbad \xe9 byte.\n')
  (folder / 'image.png').write_bytes(b'\x89PNG\r\n\x1a\n\0\0\0')
  logged = []
  prepare_lib.records_folder(records.Settings(source=str(folder), max_seq_length=32,
                                              eval_fraction=0.2,
                                   vocab_size=30), str(tmp_path / 'data'), log=logged.append)
  warnings = [l for l in logged if l.startswith('warning:')]
  assert len(warnings) == 2
  assert 'image.png' in warnings[0] and '1 line(s) held bytes that are not UTF-8' in warnings[1]


@pytest.mark.fast
def test_jsonl_objects_are_documents_and_a_missing_field_is_one_sentence(tmp_path):
  docs = [{'id': 1, 'body': 'First doc. It has two sentences.'},
          {'id': 2, 'body': 'Second doc.\n\nA new paragraph.'}]
  (tmp_path / 'a.jsonl').write_text('\n'.join(json.dumps(d) for d in docs) + '\n\n')
  with gzip.open(tmp_path / 'b.jsonl.gz', 'wt') as f:
    f.write(json.dumps({'body': 'Zipped caf\u00e9.'}) + '\n')
  report = corpus_lib.ReadReport()
  lines = list(corpus_lib.corpus_lines(str(tmp_path / '*.jsonl*'), report, text_field='body'))
  assert lines == ['First doc.', 'It has two sentences.', '', 'Second doc.', 'A new paragraph.', '',
                   'Zipped caf\u00e9.', '']
  with pytest.raises(ValueError) as e:
    list(corpus_lib.corpus_lines(str(tmp_path / 'a.jsonl'), text_field='text'))
  assert str(e.value) == (f"{tmp_path / 'a.jsonl'} line 1 has no field 'text' (it has ['body', "
                          "'id']); name the field that holds the text (launch/prepare_data.py "
                          "--text_field, launch/train.py --config.data.text_field)")
  (tmp_path / 'c.jsonl').write_text('{"text": "ok"}\nnot json\n')
  with pytest.raises(ValueError, match='c.jsonl line 2 is not JSON'):
    list(corpus_lib.corpus_lines(str(tmp_path / 'c.jsonl')))


@pytest.mark.fast
def test_a_device_or_a_pipe_is_no_corpus_and_says_what_it_is(tmp_path):
  with pytest.raises(FileNotFoundError, match=r"^the corpus '/dev/zero' is a device, not a file "):
    corpus_lib.resolve_files('/dev/zero')
  os.mkfifo(tmp_path / 'pipe')
  with pytest.raises(FileNotFoundError, match='is a named pipe, not a file whose size is known'):
    corpus_lib.Source(str(tmp_path / 'pipe'))


def _awkward_corpus(folder, seed: int, line: int):
  """Files whose documents test every boundary a part can fall on: runs of blank lines, lines of
  spaces (blank) and of NULs, CRLF, bytes that are not UTF-8, lines of several sentences, lines
  longer than `line` (cut in pieces) of text and of spaces, JSON lines, gzip, a binary file."""
  import random
  rng = random.Random(seed)
  words = ['cat', 'sat', 'on', 'a', 'mat.', 'Dogs', 'ran', 'past.', 'caf\xe9', 'x']
  pieces = []
  for _ in range(200):
    kind = rng.random()
    if kind < 0.15:
      pieces.append(b'\n' * rng.randint(1, 3))
    elif kind < 0.2:
      pieces.append(b' ' * rng.randint(1, 2 * line) + b'\n')
    elif kind < 0.205:  # (rare: text holds under one NUL byte in 1,000)
      pieces.append(b'\0 \n')
    elif kind < 0.28:
      pieces.append((' '.join(rng.choices(words, k=3 * line // 8)) + '\n').encode())
    elif kind < 0.31:
      pieces.append(b'bad \xff\xfe bytes here\r\n')
    else:
      pieces.append((' '.join(rng.choices(words, k=rng.randint(1, 12))) + '\n').encode())
  raw = b''.join(pieces[:100] + [b'\0 \0\n'] + pieces[100:])
  (folder / 'a.txt').write_bytes(raw)
  (folder / 'b.txt').write_bytes(raw[len(raw) // 3:] + b'no newline at the end')
  with gzip.open(folder / 'c.txt.gz', 'wb') as f:
    f.write(raw[:len(raw) // 2])
  (folder / 'd.bin').write_bytes(bytes(range(256)) * 20)
  with open(folder / 'e.jsonl', 'w') as f:
    for i in range(40):
      f.write(json.dumps({'text': ' '.join(rng.choices(words, k=rng.randint(0, 9))) or None})
              + ('\n' if i % 7 else '\n\n'))
  return str(folder)


@pytest.mark.fast
@pytest.mark.parametrize('seed', [0, 1, 2])
def test_the_parts_of_a_corpus_give_its_documents_each_once_in_order(tmp_path, seed,
                                                                     monkeypatch):
  """However a corpus is cut into parts (byte ranges down to a few bytes, falling inside lines,
  on blank lines, inside long lines and their pieces), reading every part alone gives the
  documents of one sequential read, each once and in order, and the same counts of what the
  reading met; each document starts inside its part."""
  line = 300  # (long lines at 300 bytes here instead of 100,000: small files, the same logic)
  monkeypatch.setattr(corpus_lib, 'MAX_LINE_BYTES', line)
  monkeypatch.setattr(corpus_lib, 'MAX_DOCUMENT_CHARS', 2 * line)  # (long documents: cut)
  source = corpus_lib.Source(_awkward_corpus(tmp_path, seed, line))
  whole = list(source.documents())
  counted = ('files', 'skipped_binary', 'nul_bytes', 'lines_with_bad_bytes', 'long_lines_cut',
             'lines_split', 'null_texts', 'long_documents_cut')
  assert len(whole) > 100 and source.report.long_lines_cut and source.report.nul_bytes
  assert source.report.long_documents_cut
  assert [b.split(' ')[0] for b in source.report.skipped_binary] == [str(tmp_path / 'd.bin')]
  for shards in (1, 7, 40, 300):
    parts = source.parts(shards)
    report = corpus_lib.ReadReport()
    read = []
    for part in parts:
      for start, doc in source.part_documents(part, report):
        if not source.files[part.file].endswith('.gz'):
          assert part.start <= start < part.end, (part, start)
        read.append(doc)
    assert read == whole, shards
    assert {k: getattr(report, k) for k in counted} == {
        k: getattr(source.report, k) for k in counted}, shards
  assert len(parts) > 300 and [p.index for p in parts] == list(range(len(parts)))
