#!/usr/bin/env bash
# bagua under a real Slurm on this one machine: Debian's slurmctld, two
# slurmd (nodes n1 and n2, each with its own port) and munge. Checks what
# docs/multi-node.md ("Slurm") promises, with the docs' own sbatch scripts:
#   1. the 2-node sbatch script trains; recipe.resolved.yaml records the
#      job's world (2 nodes, master n1), not the recipe's one node;
#   2. `scancel --signal=USR1` stops every task at one step with a
#      checkpoint (exit 75), the script requeues, and the requeued job
#      resumes from that step and finishes;
#   3. the failure table's exit codes as srun tasks: a peer that never
#      starts (rendezvous timeout) 3, a peer killed mid-run 3 on the
#      survivor, an unresolvable master 2, and `bagua run` in the batch
#      script without srun 2 at once;
#   4. a plain `scancel` cancels: the tasks checkpoint, nothing requeues.
#
# Not part of the README's test command: it needs root, starts daemons,
# adds "n1 n2" to /etc/hosts while it runs (removed at the end) and takes
# about two minutes. Run it after scripts/build.sh:
#   sudo bash scripts/slurm-check.sh        # KEEP=1 keeps its directory
# It installs slurmctld, slurmd, slurm-client and munge when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
source_dir=$PWD
bagua=${BAGUA:-$source_dir/build/cli/bagua}
began=$(date +%s)
[ "$(id -u)" = 0 ] || { echo "slurm-check: needs root (daemons, /etc/hosts)" >&2; exit 2; }
[ -x "$bagua" ] || { echo "slurm-check: no $bagua; run scripts/build.sh first" >&2; exit 2; }
if ! command -v slurmctld > /dev/null || ! command -v slurmd > /dev/null || ! command -v sbatch > /dev/null ||
   ! command -v munged > /dev/null; then
  echo "slurm-check: installing slurmctld slurmd slurm-client munge"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends slurmctld slurmd slurm-client munge
fi

work=$(mktemp -d /tmp/bagua-slurm.XXXXXX)
export SLURM_CONF=$work/slurm.conf
hosts_mark="# bagua-slurm-check $$"
failures=0
cleanup() {
  for pid in "$work"/*.pid; do [ -f "$pid" ] && kill "$(cat "$pid")" 2> /dev/null || true; done
  sed -i "/$hosts_mark/d" /etc/hosts
  if [ "${KEEP:-0}" = 1 ]; then echo "slurm-check: kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
check() {  # check DESCRIPTION COMMAND...: runs the test command, counts a failure
  local what=$1; shift
  if "$@"; then echo "  ok: $what"; else echo "  FAILED: $what"; failures=$((failures + 1)); fi
}

# ---- the cluster: munge, the controller, two nodes on this host
mkdir -p "$work"/spool/ctld "$work"/spool/n1 "$work"/spool/n2 "$work"/log
cpus=$(( $(nproc) < 2 ? 2 : $(nproc) ))
cat > "$SLURM_CONF" << EOF
ClusterName=baguacheck
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=16817
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$work/spool/ctld
SlurmdSpoolDir=$work/spool/%n
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd-%n.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
KillWait=30
NodeName=n1 NodeHostname=$(hostname) NodeAddr=127.0.0.1 Port=17001 CPUs=$cpus State=UNKNOWN
NodeName=n2 NodeHostname=$(hostname) NodeAddr=127.0.0.1 Port=17002 CPUs=$cpus State=UNKNOWN
PartitionName=main Nodes=n[1-2] Default=YES MaxTime=INFINITE State=UP
EOF
getent hosts n1 > /dev/null || echo "127.0.0.1 n1 n2 $hosts_mark" >> /etc/hosts
if ! pgrep -x munged > /dev/null; then
  mkdir -p /run/munge && chown munge:munge /run/munge
  runuser -u munge -- /usr/sbin/munged
fi
slurmctld
slurmd -N n1
slurmd -N n2
for _ in $(seq 60); do sinfo -h -o %t 2> /dev/null | grep -q idle && break; sleep 0.5; done
sinfo

# ---- the recipe: the quickstart's MLP on Fashion-MNIST, small steps
cat > "$work/recipe.yaml" << EOF
name: slurm-check
model: {torchscript: $source_dir/tests/fixtures/models/mlp_small.pt, loss: cross_entropy}
data:
  train: {format: idx, images: /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz,
          labels: /usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz}
  batch_size: 16
optimizers: [{type: sgd, lr: 0.05, momentum: 0.9}]
distributed: {timeout_s: 20}
train: {epochs: 1, max_steps: 40, log_every_steps: 20, threads: 1}
checkpoint: {every_steps: 20, keep: 2}
output: {dir: $work/run}
EOF
recipe=$work/recipe.yaml

job_state() { scontrol show job "$1" 2> /dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
wait_job() {  # wait_job ID [SECONDS]: until it is no longer pending, running or requeued
  local t=${2:-300}
  for _ in $(seq $((t * 2))); do
    case "$(job_state "$1")" in PENDING | RUNNING | CONFIGURING | COMPLETING | REQUEUED | REQUEUE_HOLD) sleep 0.5 ;; *) return 0 ;; esac
  done
  return 1
}
job_exit() { scontrol show job "$1" | sed -n 's/.* ExitCode=\([0-9]*\):.*/\1/p' | head -1; }

# ---- 1. the docs' sbatch script trains on two nodes
echo "1. the 2-node sbatch script"
cat > "$work/train.sh" << EOF
#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --output=$work/train-%j.out
export OMP_NUM_THREADS=1
srun --kill-on-bad-exit=1 $bagua run $recipe --set output.dir=$work/train
EOF
jid=$(sbatch --parsable "$work/train.sh")
wait_job "$jid"
check "exit 0 (job $jid: $(job_state "$jid"), exit $(job_exit "$jid"))" [ "$(job_exit "$jid")" = 0 ]
check "model.pt written" test -f "$work/train/model.pt"
check "recipe.resolved.yaml records 2 nodes" grep -q "nnodes: 2" "$work/train/recipe.resolved.yaml"
check "recipe.resolved.yaml records master n1" grep -q "master_addr: n1" "$work/train/recipe.resolved.yaml"

# ---- 2. scancel --signal=USR1: checkpoint, 75, requeue, resume
echo "2. preemption notice and requeue"
cat > "$work/requeue.sh" << EOF
#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --signal=USR1@90
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=$work/requeue-%j.out
export OMP_NUM_THREADS=1
srun --kill-on-bad-exit=1 $bagua run $recipe --set output.dir=$work/requeue --set train.max_steps=1800 \\
  --set train.log_every_steps=100 --set checkpoint.every_steps=100
code=\$?
if [ \$code -eq 75 ]; then scontrol requeue "\$SLURM_JOB_ID"; fi
exit \$code
EOF
jid=$(sbatch --parsable "$work/requeue.sh")
out=$work/requeue-$jid.out
for _ in $(seq 240); do grep -q "step 200/" "$out" 2> /dev/null && break; sleep 0.5; done
scancel --signal=USR1 "$jid"
wait_job "$jid" 600
check "the requeued job finished (job $jid: $(job_state "$jid"), exit $(job_exit "$jid"))" [ "$(job_exit "$jid")" = 0 ]
check "every task stopped at one step with a checkpoint" grep -q "stopped by a signal at step" "$out"
check "the requeued run resumed from it" grep -q "resumed from $work/requeue/checkpoints" "$out"
check "and wrote model.pt" test -f "$work/requeue/model.pt"

# ---- 3. exit codes of the failure table, per task
echo "3. exit codes"
cat > "$work/codes.sh" << EOF
#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --output=$work/codes-%j.out
export OMP_NUM_THREADS=1
record() { "\$@"; echo "task \$SLURM_PROCID exit \$?" >> $work/codes-\$SLURM_JOB_ID.tasks; }
export -f record
case "\$1" in
  missing)  # task 1 never starts bagua: task 0 waits out the rendezvous
    srun --kill-on-bad-exit=0 bash -c 'if [ \$SLURM_PROCID = 1 ]; then echo "task 1 exit skipped" >> $work/codes-\$SLURM_JOB_ID.tasks; exit 0; fi; record $bagua run $recipe --set output.dir=$work/missing --set distributed.timeout_s=5' ;;
  killed)   # task 1 kills itself at step 5: task 0 loses its peer
    BAGUA_FAULT_AT_STEP=1:5 srun --kill-on-bad-exit=0 bash -c 'record $bagua run $recipe --set output.dir=$work/killed --set distributed.timeout_s=10' ;;
  resolve)  # a master address that does not resolve
    MASTER_ADDR=no-such-host.invalid srun --kill-on-bad-exit=0 bash -c 'record $bagua run $recipe --set output.dir=$work/resolve --set distributed.timeout_s=5' ;;
  batch)    # bagua run in the batch script, without srun
    $bagua run $recipe --set output.dir=$work/batch --set distributed.timeout_s=60
    echo "task batch exit \$?" >> $work/codes-\$SLURM_JOB_ID.tasks ;;
esac
EOF
task_code() { sed -n "s/^task $2 exit //p" "$work/codes-$1.tasks" 2> /dev/null | head -1; }
for case in missing killed resolve batch; do
  started=$(date +%s)
  jid=$(sbatch --parsable "$work/codes.sh" "$case")
  wait_job "$jid" 180
  took=$(( $(date +%s) - started ))
  case $case in
    missing) check "a peer that never starts: task 0 exits 3" [ "$(task_code "$jid" 0)" = 3 ] ;;
    killed) check "a peer killed mid-run: the survivor exits 3" [ "$(task_code "$jid" 0)" = 3 ] ;;
    resolve) check "an unresolvable master: rank 0 exits 2" [ "$(task_code "$jid" 0)" = 2 ] ;;
    batch)
      check "bagua run in the batch script: exit 2" [ "$(task_code "$jid" batch)" = 2 ]
      check "... at once, not after timeout_s (${took} s)" [ "$took" -lt 30 ]
      check "... saying to use srun" grep -q "not one of its 2 tasks" "$work/codes-$jid.out" ;;
  esac
done

# ---- 4. a plain scancel cancels: checkpoint, no requeue
echo "4. plain scancel"
rm -rf "$work/requeue"
jid=$(sbatch --parsable "$work/requeue.sh")
out=$work/requeue-$jid.out
for _ in $(seq 240); do grep -q "step 200/" "$out" 2> /dev/null && break; sleep 0.5; done
scancel "$jid"
wait_job "$jid" 120
check "the job is cancelled, not requeued ($(job_state "$jid"))" [ "$(job_state "$jid")" = CANCELLED ]
check "the tasks still stopped at a step with a checkpoint" grep -q "stopped by a signal at step" "$out"

echo "slurm-check: $failures failure(s), $(( $(date +%s) - began )) s"
[ "$failures" = 0 ]
