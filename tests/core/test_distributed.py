"""The core's torch.distributed collectives: no-ops in one process, rank-order results over two gloo processes."""

import json

import torch
from processes import run_ranks

from dataflex_callbacks._distributed import all_gather_objects, all_gather_rows, all_reduce_sum, world_size_and_rank


def test_without_a_process_group_every_collective_returns_its_argument():
    values, rows = torch.arange(3, dtype=torch.float64), torch.ones(2, 4)
    assert world_size_and_rank() == (1, 0)
    assert all_reduce_sum(values) is values and all_gather_rows(rows) is rows
    assert all_gather_objects({"a": 1}) == [{"a": 1}]


TWO_RANK_WORKER = r"""
import json, sys
import torch
import torch.distributed as dist
from dataflex_callbacks import DomainMixingSampler
from dataflex_callbacks._distributed import all_gather_objects, all_gather_rows, all_reduce_sum, world_size_and_rank

rank, init, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=2)
sums = torch.tensor([1.0, 2.0], dtype=torch.float64) * (rank + 1)
summed = all_reduce_sum(sums)
rows = torch.arange(3 * rank * 2, dtype=torch.float64).reshape(3 * rank, 2) + 100 * rank  # rank 0 sends no row
empty_everywhere = all_gather_rows(torch.zeros(0, 2))
sampler = DomainMixingSampler(labels=["a"] * 8, batch_size=2, layout="shard")
json.dump({"world": list(world_size_and_rank()), "sums": sums.tolist(), "summed": summed.tolist(),
           "summed_dtype": str(summed.dtype), "rows": all_gather_rows(rows).tolist(),
           "empty_shape": list(empty_everywhere.shape),
           "objects": all_gather_objects({"rank": rank, "key": ("p", rank)}),
           "sampler": [sampler.num_replicas, sampler.rank]}, open(f"{out}/rank{rank}.json", "w"))
dist.barrier()
dist.destroy_process_group()
"""


def test_two_ranks_get_the_same_sums_rows_and_objects_in_rank_order(tmp_path):
    run_ranks([["-c", TWO_RANK_WORKER, str(r), str(tmp_path / "init"), str(tmp_path)] for r in range(2)])
    got = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    rank1_rows = (torch.arange(6, dtype=torch.float64).reshape(3, 2) + 100).tolist()
    for rank, record in enumerate(got):
        assert record["world"] == [2, rank] and record["sampler"] == [2, rank]
        assert record["summed"] == [3.0, 6.0] and record["summed_dtype"] == "torch.float64"
        assert record["sums"] == [float(rank + 1), 2.0 * (rank + 1)]  # the argument is left as it was
        assert record["rows"] == rank1_rows and record["empty_shape"] == [0, 2]
        assert record["objects"] == [{"rank": 0, "key": ["p", 0]}, {"rank": 1, "key": ["p", 1]}]
