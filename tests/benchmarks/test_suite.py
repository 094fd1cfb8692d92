"""The real-text task suite's builder (benchmarks/suite.py), on small files of the real formats:
an apt package index and a tree of groff manual pages, written here."""

import csv
import gzip
import json
import os

import pytest

from benchmarks import suite


def _packages(path):
  words = {'games': 'arcade puzzle shooter board', 'science': 'molecular astronomy physics data',
           'sound': 'audio mixer synthesizer midi', 'net': 'network socket proxy dns'}
  stanzas = []
  for section, vocabulary in words.items():
    for i in range(60):
      role = ('program', 'shared-lib')[i % 2]
      stanzas.append(f'Package: {section}-{i}\nVersion: 1.0\n'
                     f'Description: {vocabulary.split()[i % 4]}'
                     f' tool number {i} for {section}\nTag: role::{role}, use::testing,\n'
                     f' interface::commandline\nSection: {"contrib/" if i == 3 else ""}{section}\n')
  stanzas.append('Package: same-text\nDescription: arcade tool number 0 for games\n'
                 'Section: sound\n')  # a text seen with two sections: dropped
  path.write_text('\n'.join(stanzas))


def _page(path, name, section, description, heading='DESCRIPTION'):
  text = (f'.\\" a comment\n.TH {name.upper()} {section}\n.SH NAME\n{name} \\- does things\n'
          f'.SH SYNOPSIS\n.B {name}\n\\fIfile\\fR\n.SH {heading}\n.PP\n{description}\n.PP\n'
          'A second paragraph.\n')
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with gzip.open(path, 'wt', encoding='utf-8') as f:
    f.write(text)


def _man(root):
  for section, what in (('1', 'prints the \\fBfiles\\fR of a user\\-given folder'),
                        ('2', 'is a system call that asks the kernel for \\(lqmemory\\(rq'),
                        ('3', 'is a library function returning a pointer')):
    for i in range(60):
      _page(os.path.join(root, f'man{section}', f'tool{i}.{section}.gz'), f'tool{i}', section,
            f'The tool{i} {what} number {i}.')
  os.symlink(os.path.join(root, 'man1', 'tool0.1.gz'), os.path.join(root, 'man1', 'link.1.gz'))
  with gzip.open(os.path.join(root, 'man1', 'so.1.gz'), 'wt') as f:
    f.write('.so man1/tool0.1\n')  # a page that only names another: skipped
  for language, text in (('de', 'Dieses Programm liest die Dateien des Benutzers und schreibt sie '
                                'danach in das angegebene Verzeichnis zur\\(:uck'),
                         ('fr', "Ce programme lit les fichiers de l\\*(Aqutilisateur et les "
                                "\\('ecrit ensuite dans le r\\('epertoire donn\\('e")):
    for i in range(60):
      _page(os.path.join(root, language, 'man1', f'tool{i}.1.gz'), f'tool{i}', '1',
            f'{text} {i}.', heading='BESCHREIBUNG' if language == 'de' else 'DESCRIPTION')


def _rows(path):
  with open(path, newline='', encoding='utf-8') as f:
    return list(csv.DictReader(f))


@pytest.mark.fast
def test_the_suite_is_built_from_package_indexes_and_manual_pages(tmp_path):
  _packages(tmp_path / 'Packages')
  _man(str(tmp_path / 'man'))
  sources = suite.Sources(packages=str(tmp_path / 'Packages'), man=str(tmp_path / 'man'),
                          per_class=40, min_class=10)
  out = str(tmp_path / 'suite')
  lines = []
  tasks = {t['name']: t for t in suite.build(out, sources, log=lines.append)}
  assert list(tasks) == ['debian_section', 'debian_role', 'man_section', 'man_language']
  assert tasks['debian_section']['labels'] == ['games', 'net', 'science', 'sound']
  assert tasks['debian_role']['labels'] == ['program', 'shared library']
  assert tasks['man_section']['labels'] == ['1', '2', '3']
  assert tasks['man_language']['labels'] == ['de', 'fr']
  for name, t in tasks.items():
    splits = {s: _rows(os.path.join(out, name, f'{s}.csv')) for s in ('train', 'dev', 'test')}
    texts = {s: {r['text'] for r in rows} for s, rows in splits.items()}
    assert not (texts['train'] & texts['dev'] or texts['train'] & texts['test']
                or texts['dev'] & texts['test']), name  # disjoint
    assert {s: len(r) for s, r in splits.items()} == t['examples']
    counts = {l: sum(r['label'] == l for r in splits['train']) for l in t['labels']}
    assert max(counts.values()) <= 40 and min(counts.values()) >= 10, (name, counts)
    assert all(len(r) <= 5 for s in ('dev', 'test') for r in [
        [x for x in splits[s] if x['label'] == l] for l in t['labels']])  # an eighth of 40
    corpus = open(os.path.join(out, name, 'corpus.txt'), encoding='utf-8').read()
    assert corpus.split('\n\n')[0].strip() == splits['train'][0]['text']
    assert len(corpus.strip().split('\n\n')) == len(splits['train'])  # train texts only
  section = _rows(os.path.join(out, 'debian_section', 'train.csv'))
  assert 'arcade tool number 0 for games' not in {r['text'] for r in section}
  pages = {r['text'] for s in ('train', 'dev', 'test')
           for r in _rows(os.path.join(out, 'man_section', f'{s}.csv'))}
  assert any(p.startswith('The tool7 prints the files of a user-given folder number 7.')
             for p in pages)
  assert any('"memory"' in p for p in pages) and not any('\\' in p for p in pages)
  assert not any('second paragraph' in p for p in pages if p.startswith('The tool1 '))  # first only
  languages = {r['text'] for s in ('train', 'dev', 'test')
               for r in _rows(os.path.join(out, 'man_language', f'{s}.csv'))}
  assert any('zurück' in t for t in languages) and any("l'utilisateur" in t and 'écrit' in t
                                                        for t in languages)
  again = str(tmp_path / 'again')  # the same sources give the same files
  suite.build(again, sources, log=lambda *_: None)
  for name in tasks:
    for s in ('train', 'dev', 'test'):
      assert _rows(os.path.join(out, name, f'{s}.csv')) == _rows(os.path.join(again, name,
                                                                             f'{s}.csv'))
  described = json.load(open(os.path.join(out, 'suite.json')))
  assert [t['name'] for t in described['tasks']] == list(tasks) and len(lines) == 4
  with pytest.raises(ValueError, match='no apt package index matches'):
    suite.build(str(tmp_path / 'none'), suite.Sources(packages=str(tmp_path / 'nothing*')))
