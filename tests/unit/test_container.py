"""Each function's own caches (adapters/container.py): what one function cached another never
sees, a function forgets only its own, and new execution environments start with none."""

import threading

from gpufill.adapters import container


def test_two_functions_reading_the_same_item_each_read_it_once():
    reads = []

    @container.cached()
    def item(key):
        reads.append((container.function_name(), key))
        return f"{key}@{len(reads)}"

    with container.running_as("gpufill-local-PrepareRegion"):
        first = item("plan#1")
        assert item("plan#1") == first
    with container.running_as("gpufill-local-LaunchBatch"):
        second = item("plan#1")
        assert item("plan#1") == second
    assert reads == [("gpufill-local-PrepareRegion", "plan#1"), ("gpufill-local-LaunchBatch", "plan#1")]
    with container.running_as("gpufill-local-LaunchBatch"):
        item.cache_clear()  # forgets LaunchBatch's own only
        item("plan#1")
    with container.running_as("gpufill-local-PrepareRegion"):
        assert item("plan#1") == first
    assert len(reads) == 3
    container.start_afresh()
    with container.running_as("gpufill-local-PrepareRegion"):
        item("plan#1")
    assert len(reads) == 4


def test_the_function_name_is_lambdas_own_variable_unless_a_thread_runs_as_another(monkeypatch):
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "gpufill-prod-RankPools")
    assert container.function_name() == "gpufill-prod-RankPools"
    seen = {}
    with container.running_as("gpufill-local-ScoreRegion"):
        # A thread started meanwhile is not inside this invocation.
        thread = threading.Thread(target=lambda: seen.update(other=container.function_name()))
        thread.start()
        thread.join()
        assert container.function_name() == "gpufill-local-ScoreRegion"
        with container.running_as(None):
            assert container.function_name() == "gpufill-prod-RankPools"
    assert seen == {"other": "gpufill-prod-RankPools"}
    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME")
    assert container.function_name() == ""


def test_a_per_function_value_is_made_once_per_function():
    made = []
    store = container.PerFunction(lambda: made.append(1) or {})
    store.mine()["a"] = 1
    assert store.mine() == {"a": 1} and len(made) == 1
    with container.running_as("other"):
        assert store.mine() == {}
        store.forget_mine()
    assert store.mine() == {"a": 1} and len(made) == 2
    store.forget_all()
    assert store.mine() == {}


def test_the_regions_config_is_read_once_per_function_and_again_when_a_minute_old(monkeypatch):
    from gpufill.adapters import regions_config

    reads, now = [], [1000.0]
    monkeypatch.setenv("REGIONS_PARAMETER", "/gpufill/dev/regions")
    monkeypatch.setattr(regions_config, "_read", lambda name: reads.append(name) or {"regions": ["us-west-2"]})
    monkeypatch.setattr(regions_config.time, "monotonic", lambda: now[0])
    regions_config.forget()
    with container.running_as("gpufill-dev-ValidateRequest"):
        assert regions_config.load().regions == ["us-west-2"]
        regions_config.load().regions.append("changed by a caller")  # never the kept value
        assert regions_config.load().regions == ["us-west-2"]
    with container.running_as("gpufill-dev-PrepareRegion"):
        regions_config.load()
    assert len(reads) == 2
    now[0] += regions_config.MAX_AGE_SECONDS
    with container.running_as("gpufill-dev-PrepareRegion"):
        regions_config.load()
    assert reads == ["/gpufill/dev/regions"] * 3
    regions_config.forget()


def test_concurrent_invocations_of_one_function_run_in_environments_of_their_own_then_reuse_them():
    from gpufill.local.lambdas import ExecutionEnvironments

    environments = ExecutionEnvironments()
    first = environments.take("gpufill-local-ScoreRegion")
    second = environments.take("gpufill-local-ScoreRegion")  # while the first is busy: a new one
    other = environments.take("gpufill-local-RankPools")
    assert (first, second, other) == ("gpufill-local-ScoreRegion", "gpufill-local-ScoreRegion#2", "gpufill-local-RankPools")
    environments.give_back("gpufill-local-ScoreRegion", second)
    assert environments.take("gpufill-local-ScoreRegion") == second  # a free, warm one is reused
    assert environments.take("gpufill-local-ScoreRegion") == "gpufill-local-ScoreRegion#3"
