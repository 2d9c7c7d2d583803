"""Rank 0's bars as the kernel draws them from what rank 0 published (no engines: the published
dicts are given here in the order a slow poll can see them)."""

from ddp_tutorial.ipp.progress import RankZeroBar


def draw(looks, capsys) -> str:
    bar = RankZeroBar()
    for published in looks:
        bar.show(published)
    bar.close()
    return capsys.readouterr().err


def test_a_bar_that_began_and_ended_between_two_looks_is_still_drawn(capsys):
    """The kernel's first look comes when epoch 0 is over and epoch 1 is under way: epoch 0's bar
    is drawn anyway, at the count it ended at (it was lost before: issue 39)."""
    err = draw([{"bars": [["epoch 0", 32, 32], ["epoch 1", 5, 32]]},
                {"bars": [["epoch 0", 32, 32], ["epoch 1", 32, 32]]}], capsys)
    assert "epoch 0: 100%|" in err and "epoch 1: 100%|" in err and err.count("32/32") >= 2, err
    assert err.index("epoch 0") < err.index("epoch 1")


def test_a_bar_stopped_early_is_not_shown_as_complete(capsys):
    """A bar that ended at 10 of 32 (a loop left early) stays at 10/32: the history holds the real
    count, nothing is filled up by guess."""
    err = draw([{"bars": [["epoch 0", 10, 32], ["test", 1, 1]]}], capsys)
    assert "10/32" in err and "epoch 0:  31%|" in err and "test: 100%|" in err, err


def test_nothing_published_draws_nothing(capsys):
    assert draw([None, {}, {"bars": []}], capsys) == ""
