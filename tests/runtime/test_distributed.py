"""How work is split between the processes of a distributed run."""

from retrieval.runtime.distributed import DistributedContext, shard_range


def test_shards_cover_every_item_once_in_order():
    for size in (0, 1, 5, 8, 11):
        for world_size in (1, 2, 3, 4):
            shards = [shard_range(size, DistributedContext(rank, world_size)) for rank in range(world_size)]
            assert [i for shard in shards for i in shard] == list(range(size))
            assert max(map(len, shards)) - min(map(len, shards)) <= 1
