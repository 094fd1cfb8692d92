"""The fine-tuning's inputs, the room below the kinds: where labelled text comes from and how it
becomes arrays, of no kind in particular.

    tasks.py      where labelled text comes from (GLUE, the built-in tasks, SQuAD; your own
                  files through files.py, read as meant)
    files.py      your own files: CSV / TSV / JSON lines, their columns, what each row holds
    encode.py     text pairs -> [CLS] a [SEP] b [SEP] id arrays, truncated by the documented rule;
                  tagged sentences -> tags on each word's first sub-token
    squad.py      SQuAD's files, its windows, span decoding and the official EM / F1
    packing.py    examples placed in rows, planned: which sequences share a row, the shapes of a
                  run's batches, a split's prediction calls (the driver's batches.py assembles)
"""
