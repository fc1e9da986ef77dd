// Slurm's host-list syntax, as in SLURM_JOB_NODELIST, expanded in C++ (no
// `scontrol show hostnames` needed): comma-separated names, each with any
// number of bracket groups of numbers and ranges, zero-padded to the width
// of the range's first bound:
//
//   "node[01-03,07]"        node01 node02 node03 node07
//   "gpu-a[1-2]-ib,login1"  gpu-a1-ib gpu-a2-ib login1
//   "rack[1-2]-n[8-9]"      rack1-n8 rack1-n9 rack2-n8 rack2-n9
//
// And what a worker started by Slurm takes from it when MASTER_ADDR and
// MASTER_PORT are not set (docs/multi-node.md, "Slurm").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bagua::launch {

// Every host name of `list`, in order. Throws bagua::Error (a user error)
// naming what is malformed: an unclosed bracket, an empty item, a range
// whose end is below its start, more than 100000 names.
std::vector<std::string> expand_slurm_hostlist(const std::string& list);

// The rendezvous port a Slurm job uses when none is given: 20000 plus the
// job id modulo 10000 (so two jobs sharing a node rarely collide, and every
// task of one job computes the same port).
int slurm_default_port(int64_t job_id);

}  // namespace bagua::launch
