"""Times building records from a large corpus with 1, 2, 3 ... workers: each worker's bytes read
and MB/s, the command's time, the peak memory of any of its processes, and whether every build
wrote the same bytes.

    python -m benchmarks.prepare_benchmark --out=/tmp/prep_bench --megabytes=1024 --workers=1,2
        [--files=16] [--layouts=files,file] [--beam_workers=2] [--against=RECORDS]

The corpus is the built-in one written again and again, each copy's documents in another order
(`--files` files of about the same size, and one file of it all), until it holds `--megabytes`;
the vocabulary is trained once on the built-in corpus and given to every build (--vocab), so the
builds time the records alone. Each build is `launch/prepare_data.py` in a process of its own.
"""

import filecmp
import os
import random
import re
import subprocess
import sys
import time

from absl import app
from absl import flags

from electra_jax.data import corpus as corpus_lib
from electra_jax.data import tokenizer as tokenizer_lib

_OUT = flags.DEFINE_string('out', '/tmp/prep_bench', 'a folder for the corpus and the records')
_MEGABYTES = flags.DEFINE_integer('megabytes', 1024, 'the corpus size')
_FILES = flags.DEFINE_integer('files', 16, 'files of the corpus of several files')
_WORKERS = flags.DEFINE_string('workers', '1,2', 'worker counts to build with, in turn')
_LAYOUTS = flags.DEFINE_string('layouts', 'files,file', "'files' (--files of them) and/or "
                               "'file' (one)")
_SHARDS = flags.DEFINE_integer('num_shards', 64, 'train shards')
_REPEATS = flags.DEFINE_integer('repeats', 1, 'builds of each count, alternating')
_BEAM = flags.DEFINE_integer('beam_workers', 0, "a build on Beam's DirectRunner with this many "
                             'processes too (0: none)')
_AGAINST = flags.DEFINE_string('against', None, 'a records folder an earlier run of this built '
                               'from the same corpus, to compare every build with (default: the '
                               "run's first build)")

_WORKER_LINE = re.compile(r'^((?:worker \d+/\d+)|(?:train shard \d+)): .*?([\d,.]+) MB/s, done in '
                          r'.*?; ([\d,.]+) MB read from the files in all')


def write_corpus(folder: str, megabytes: int, files: int) -> tuple[str, str]:
  """(the folder of `files` files, the single file): the built-in corpus again and again, each
  copy's documents shuffled, to about `megabytes` MB."""
  os.makedirs(os.path.join(folder, 'files'), exist_ok=True)
  single = os.path.join(folder, 'one.txt')
  docs = ['\n'.join(d) + '\n\n' for d in corpus_lib.builtin_documents()]
  target = megabytes * 10**6
  outs = [open(os.path.join(folder, 'files', f'{i:03d}.txt'), 'w', encoding='utf-8')
          for i in range(files)]
  written, copy = 0, 0
  with open(single, 'w', encoding='utf-8') as one:
    while written < target:
      order = list(range(len(docs)))
      random.Random(copy).shuffle(order)
      text = ''.join(docs[k] for k in order)
      one.write(text)
      outs[copy % files].write(text)
      written += len(text.encode('utf-8'))
      copy += 1
  for f in outs:
    f.close()
  return os.path.join(folder, 'files'), single


def build(corpus: str, out: str, vocab: str, workers: int, beam: bool = False) -> dict:
  """One build in a process of its own (under GNU time, for the peak RSS of any of its processes:
  the command's own and its workers'): its time, its workers' lines, that peak."""
  start = time.perf_counter()
  done = subprocess.run(['/usr/bin/time', '-f', 'peak_rss_kb=%M', sys.executable,
                         os.path.join('launch', 'prepare_data.py'), f'--corpus={corpus}',
                         f'--output={out}', f'--vocab={vocab}', '--max_seq_length=128',
                         f'--num_shards={_SHARDS.value}', '--num_eval_shards=4',
                         f'--num_workers={workers}'] + ([
                             '--runner=DirectRunner', f'--direct_num_workers={workers}',
                             '--direct_running_mode=multi_processing'] if beam else []),
                        capture_output=True, text=True, check=False)
  seconds = time.perf_counter() - start
  if done.returncode:
    raise SystemExit(f'the build of {out} failed:\n{done.stderr[-3000:]}')
  peak = re.search(r'peak_rss_kb=(\d+)', done.stderr)
  lines = [m.groups() for m in map(_WORKER_LINE.match, done.stdout.splitlines()) if m]
  return {'seconds': seconds, 'workers': [(name, float(rate.replace(',', '')),
                                           float(mb.replace(',', ''))) for name, rate, mb in lines],
          'peak_rss_mb': int(peak.group(1)) / 1024 if peak else float('nan'),
          'stdout': done.stdout}


def same(a: str, b: str) -> bool:
  names = sorted(os.listdir(a))
  if names != sorted(os.listdir(b)):
    return False
  _, mismatch, errors = filecmp.cmpfiles(a, b, names, shallow=False)
  return not mismatch and not errors


def main(argv):
  del argv
  out = _OUT.value
  os.makedirs(out, exist_ok=True)
  vocab = os.path.join(out, 'vocab.model')
  if not os.path.exists(vocab):
    tokenizer_lib.train_sentencepiece(corpus_lib.builtin_lines(), vocab, 4096)
  folder, single = os.path.join(out, 'files'), os.path.join(out, 'one.txt')
  if not os.path.exists(single):
    print(f'writing a corpus of {_MEGABYTES.value:,} MB in {out}', flush=True)
    folder, single = write_corpus(out, _MEGABYTES.value, _FILES.value)
  counts = [int(w) for w in _WORKERS.value.split(',')]
  for layout in _LAYOUTS.value.split(','):
    corpus = folder if layout == 'files' else single
    size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder)) if (
        layout == 'files') else os.path.getsize(single)
    first = _AGAINST.value
    runs = [(w, False) for w in counts] + ([(_BEAM.value, True)] if _BEAM.value else [])
    for repeat in range(_REPEATS.value):
      for workers, beam in runs:
        records = os.path.join(out, f'records_{layout}_{workers}{"_beam" * beam}_{repeat}')
        subprocess.run(['rm', '-rf', records], check=True)
        result = build(corpus, records, vocab, workers, beam)
        first = first or records
        reads = ', '.join(f'{name} {mb / (size / 1e6):.2f}x the corpus at {rate:.2f} MB/s'
                          for name, rate, mb in result['workers'])
        if beam:  # (a line per train shard: their reads together)
          reads = (f'{len(result["workers"])} train shards read '
                   f'{sum(mb for *_, mb in result["workers"]) / (size / 1e6):.2f}x the corpus')
        print(f'{layout} ({size / 1e6:,.0f} MB), {workers} worker(s)'
              f'{" on the DirectRunner" * beam}: {result["seconds"]:.1f} s, '
              f'{size / 1e6 / result["seconds"]:.2f} MB/s in all | {reads} | peak RSS '
              f'{result["peak_rss_mb"]:,.0f} MB | the same bytes as {os.path.basename(first)}: '
              f'{same(first, records)}', flush=True)
        if records != first:
          subprocess.run(['rm', '-rf', records], check=True)


if __name__ == '__main__':
  app.run(main)
