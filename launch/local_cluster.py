r"""Run a multi-process job on this machine: N processes, each with its own CPU devices.

    python launch/local_cluster.py --num_processes=2 --devices_per_process=4 -- \
        launch/train.py --config=configs/tiny.py --workdir=/tmp/electra_2proc

Each process gets --coordinator_address (a free local port), --num_processes and --process_id
appended to the command, JAX_PLATFORMS=cpu and its own number of CPU devices. Process 0's output is
shown; the others' goes to <log_dir>/process_<i>.log. If one process fails, the others are stopped
(SIGTERM, then SIGKILL after a grace period) and the launcher exits non-zero naming it: a run is all
processes or none. Running the same command again resumes from the last checkpoint.
"""

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time


def free_port() -> int:
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def child_env(devices: int) -> dict:
  env = dict(os.environ)
  flags = re.sub(r'--xla_force_host_platform_device_count=\S+', '', env.get('XLA_FLAGS', ''))
  env['XLA_FLAGS'] = f'{flags} --xla_force_host_platform_device_count={devices}'.strip()
  env['JAX_PLATFORMS'] = 'cpu'
  return env


def _describe(code: int) -> str:
  if code < 0:
    return f'was killed by {signal.Signals(-code).name}'
  return f'exited with code {code}'


def launch(command: list[str], num_processes: int, devices: int, log_dir: str,
           grace_s: float = 30.0) -> int:
  """Runs `command` in `num_processes` processes; 0 when all succeed, else 1 (others stopped)."""
  port = free_port()
  os.makedirs(log_dir, exist_ok=True)
  procs, logs = [], []
  for i in range(num_processes):
    args = [sys.executable, *command, f'--coordinator_address=127.0.0.1:{port}',
            f'--num_processes={num_processes}', f'--process_id={i}']
    out = None
    if i:
      out = open(os.path.join(log_dir, f'process_{i}.log'), 'w')
      logs.append(out)
    procs.append(subprocess.Popen(args, env=child_env(devices), stdout=out,
                                  stderr=subprocess.STDOUT if out else None))
  failed = None
  try:
    while failed is None and any(p.poll() is None for p in procs):
      for i, p in enumerate(procs):
        if p.poll() not in (None, 0):
          failed = i
          break
      time.sleep(0.2)
  except KeyboardInterrupt:  # pass the stop on: every process saves and returns
    for p in procs:
      if p.poll() is None:
        p.send_signal(signal.SIGTERM)
    for p in procs:
      p.wait()
    return 130
  finally:
    if failed is not None:
      for p in procs:
        if p.poll() is None:
          p.terminate()
      deadline = time.time() + grace_s
      for p in procs:
        try:
          p.wait(max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
          p.kill()
          p.wait()
    for f in logs:
      f.close()
  if failed is None:
    failed = next((i for i, p in enumerate(procs) if p.returncode), None)
  if failed is not None:
    where = f'; its output is in {log_dir}/process_{failed}.log' if failed else ''
    print(f'error: process {failed} of {num_processes} {_describe(procs[failed].returncode)}'
          f'{where}; the others were stopped. Run the same command again to resume from the last '
          'checkpoint', file=sys.stderr)
    return 1
  return 0


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n', maxsplit=1)[0])
  parser.add_argument('--num_processes', type=int, default=2)
  parser.add_argument('--devices_per_process', type=int, default=4)
  parser.add_argument('--log_dir', default=None,
                      help='where processes 1.. write their output (default: a new temp folder)')
  parser.add_argument('command', nargs=argparse.REMAINDER,
                      help='-- script.py --flags ...: the command every process runs')
  args = parser.parse_args()
  command = args.command[1:] if args.command[:1] == ['--'] else args.command
  if not command:
    parser.error('give the command after --, e.g. -- launch/train.py --config=configs/tiny.py '
                 '--workdir=/tmp/electra_2proc')
  if args.num_processes < 1 or args.devices_per_process < 1:
    parser.error('--num_processes and --devices_per_process must be at least 1')
  log_dir = args.log_dir or tempfile.mkdtemp(prefix='electra_cluster_')
  sys.exit(launch(command, args.num_processes, args.devices_per_process, log_dir))


if __name__ == '__main__':
  main()
