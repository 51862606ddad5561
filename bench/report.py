"""bench/results/report.md: targets, aggregates, the scarcity view and every case, plus the closing note."""

from __future__ import annotations

from bench import diagnosis, pooled
from gpufill.constants import DEFAULT_BATCH_MAX
from gpufill.models.request import Request

from bench.analysis import Row, aggregate
from bench.costs import COLD_START_SECONDS, KARPENTER_BATCH_IDLE_SECONDS
from bench.engine_runs import EXPECTED_ENDS
from bench.outcome import STRATEGIES
from bench.tables import as_markdown, calls_table, case_table, summary_table, tier_table
from bench.targets import Verdict, judge

HOW = """\
## What runs

| strategy | runs on | what it does |
| --- | --- | --- |
| `broker` | simulator | a spot broker: regions (then types) by the classic score, one RunInstances with no AZ named for the whole remaining count (MinCount 1, MaxCount capped at the spot quota it can read); EC2 puts it in one AZ of the default VPC (the model: the AZ that can launch the most) or fails; a region that launched is asked again, one that failed is remembered and never asked again |
| `karpenter` | simulator | Karpenter's launch: per region by the classic score, one CreateFleet (instant, spot, price-capacity-optimized) for the whole remaining count over every acceptable (AZ, type) override, partial fulfilment, an ICE cache of the overrides that answered InsufficientInstanceCapacity; each fleet call waits out Karpenter's 1 s batch window first |
| `classic` | state machine | probe-and-fill as first described: `launch_mode: exact`, batch 4 halving on capacity, AZ rotation, region fallback, classic scoring{classic_scoring} |
| `gpufill` | state machine | the project's defaults ({defaults}) |
| `oracle` | simulator | knows every capacity: a lower bound on launch calls of any kind (the fewest regions whose capacity, within the quota, holds the most the market allows: one fleet call each) next to the cheapest feasible fill's $/h; the two need not be reachable together |

`classic` and `gpufill` run `statemachine/provisioner.asl.json` on the local engine (moto), a fresh
simulated account per run, so state transitions, Lambda invocations and EC2 calls are real counts
(and every run starts with nothing remembered from another run).
`broker`, `karpenter` and `oracle` are policy-level simulators over the same market model
(`bench/market.py`); `broker` and `karpenter` are given only the public view (`PublicView`: zones,
prices, tiers, quotas; no capacity) and a simulated EC2 client. They have no state machine, so their
transitions, invocations and orchestration cost are `—`.

How each figure is made:
- **fill**: launched ÷ requested.
- **launch calls / EC2 calls**: launch calls are RunInstances plus CreateFleet (a fleet call counts 1),
  each labelled by its API (gpufill's default launches by CreateFleet, classic's by RunInstances);
  EC2 calls are every call the run made (scoring included; the broker and karpenter score each region
  with two calls like gpufill; the oracle needs none).
- **sums and paired comparisons**: a median of per-case ratios of small integers hides where the
  calls and the dollars go, so every table gives the sums over the markets beside the medians, and
  gpufill is compared with each baseline market by market: the mean difference, how many markets
  went each way, and a two-sided exact sign test on those (ties dropped; `bench/stats.py`). Fleet $/h
  is paired only on markets where both launched as many instances.
- **lower bound and realistic floor**: the oracle's lower bound on launch calls knows which regions are
  empty. On a market that cannot fill the request, a strategy without that knowledge must ask every
  region that offers a requested type (one fleet call each) before it can stop short: the realistic
  floor counts those calls there and the lower bound elsewhere (`bench/oracle.py`).
- **orchestration $**: state transitions at the Standard workflow price, plus Lambda requests and
  duration, each function billed at the memory the CDK app deploys it with
  (`cdk/gpufill_stack/task_permissions.py`, read by `bench/costs.py`) for its modelled seconds, plus
  its init when it starts cold; prices and their source in `bench/prices.json`.
- **fleet $/h ×cheapest**: the fleet's $/h ÷ the cheapest fleet of the same size the market could
  give (`bench/oracle.py`), so a strategy that launches fewer instances is not rewarded for it;
  Σ$/h ÷ Σcheapest is the same over all the markets, in dollars.
- **time s**: modelled time to fill, from the latency model in `functions/gpufill/local/latency_model.json`
  completed by `bench/latency.json` (per-API latency, per-transition and per-invocation overhead, a Map
  costs its slowest branch; DynamoDB's GetItem, UpdateItem and BatchGetItem take single-digit
  milliseconds, as AWS documents). The simulators pay the same per-call latencies, one call after another.
  Wait states (instances booting) are left out: they are not time spent finding capacity, and the
  simulators have none.
- **cold starts**: every run is taken to be the first after idle, so each Lambda function on the way
  to the fill starts cold once ({cold_start:.1f} s each, `bench/latency.json`; a parallel Map's branches
  start cold side by side and add one). The broker and karpenter are long-running processes and start
  warm.
- **Karpenter's batch window**: Karpenter's provisioner waits until no pod has arrived for
  `BATCH_IDLE_DURATION` (default {batch_idle:.0f} s) before it launches; each of its fleet calls is one
  provisioning round and waits that long first.
- The oracle's call count is a true lower bound: no strategy that launches as many makes fewer.
  CreateFleet is given RunInstances' modelled latency (the latency model has no figure for it).
- Spot placement scores in the generated markets are noisy estimates (`score_noise` doublings of
  capacity per request) and the Spot Advisor tier buckets an interruption rate drawn apart from
  capacity (`bench/generate.py`); `bench/leak.py` measures what each gives away (AUC).
- Ratios are per case, then the median; a ratio against 0 (the oracle on a sold-out market) is `—`.
"""


def _how() -> str:
    fields = Request.model_fields
    defaults = [f"`launch_mode: {fields['launch_mode'].default}`", f"`batch_max` {DEFAULT_BATCH_MAX}"]
    if "scoring" in fields:
        defaults.append(f"`scoring: {fields['scoring'].default}`")
    return HOW.format(
        defaults=", ".join(defaults),
        cold_start=COLD_START_SECONDS,
        batch_idle=KARPENTER_BATCH_IDLE_SECONDS,
        classic_scoring=' (`"scoring": "classic"`)' if "scoring" in fields else "",
    )


def _verdict_table(verdicts: list[Verdict], with_examples: list[Verdict]) -> str:
    header = ["target", "measured", "verdict", "by how much", "with the examples too"]
    body = [
        [v.target, v.measured, f"**{v.word}**", v.margin, f"{w.word} ({w.measured})"]
        for v, w in zip(verdicts, with_examples)
    ]
    return as_markdown(header, body)


def broken_runs(rows: list[Row]) -> list[Row]:
    return [r for r in rows if not r.outcome.simulated and r.outcome.status not in EXPECTED_ENDS]


def render(rows: list[Row], *, seed: int, generated_names: set[str], sources: dict[str, str]) -> str:
    generated = [r for r in rows if r.case.name in generated_names]
    verdicts = judge(generated)
    parts = [
        "# gpufill scarcity benchmark",
        "",
        f"Seed {seed}: {len(generated_names)} generated markets and {len({r.case.name for r in rows}) - len(generated_names)} "
        f"hand-written ones from `examples/`, each met by {len(STRATEGIES)} strategies. Reproduce with "
        f"`python -m bench --seed {seed} --seeds 1` (`make bench` runs it with four more seeds); the same seed gives the same report.",
        "",
        "## Targets (judged on this seed's generated set)",
        "",
        _verdict_table(verdicts, judge(rows)),
        "",
        "## Aggregate, generated set",
        "",
        as_markdown(*summary_table(aggregate(generated))),
        "",
        "## Sums and paired comparisons, generated set",
        "",
        as_markdown(*pooled.totals_table(generated)),
        "",
        as_markdown(*pooled.paired_table(generated)),
        "",
        "## Aggregate, generated set and examples",
        "",
        as_markdown(*summary_table(aggregate(rows))),
        "",
        "## Against scarcity (generated set)",
        "",
        "Means per case within each tier; every tier holds one request of each size (1, 4, 16, 64).",
        "",
        as_markdown(*tier_table(generated)),
        "",
        "![Launch calls and modelled time against scarcity](scarcity.png)",
        "",
        "## Launch calls per case",
        "",
        "Calls per strategy; the fill follows in brackets when it is short of the request.",
        "",
        as_markdown(*calls_table(rows)),
        "",
        _how(),
        "## Every case, every figure",
        "",
        as_markdown(*case_table(rows)),
        "",
        ("Hand-written cases: " + "; ".join(f"`{name}` = {src}" for name, src in sources.items()) + ".") if sources else "",
        "",
        "## Closing note",
        "",
    ]
    for v in verdicts:
        parts.append(f"- **{v.word}** — {v.target}: {v.margin}.")
        if v.judged and not v.met and v.misses:
            shown = v.misses[:8]
            more = len(v.misses) - len(shown)
            parts.append("  Cases: " + "; ".join(shown) + (f"; and {more} more" if more > 0 else "") + ".")
    broken = broken_runs(rows)
    if broken:
        parts.append("")
        parts.append("Runs that ended in a way no market explains (their figures above are not results):")
        parts.append("")
        parts.extend(f"- {r.outcome.strategy} on {r.case.name}: {r.outcome.status}" for r in broken)
    with_examples = [v for v in judge(rows) if v.judged and not v.met]
    if with_examples and len(generated) < len(rows):
        parts.append("")
        parts.append("With the hand-written examples counted too:")
        parts.append("")
        for v in with_examples:
            parts.append(f"- **MISSED** — {v.target}: {v.margin}.")
        examples = [r for r in rows if r.case.name not in generated_names]
        parts.extend(f"- {note}" for note in diagnosis.not_fewer_calls(examples))
    parts.append("")
    parts.append("Where the calls go (generated set):")
    parts.append("")
    parts.extend(f"- {note}" for note in diagnosis.notes(verdicts, generated))
    parts.append("")
    return "\n".join(parts)


def _warm_section(rows: list[Row]) -> list[str]:
    header, body = pooled.warm_table(rows)
    if not body:
        return []
    return [
        "## Warm facts: the next run in the same deployment",
        "",
        (
            "Each market's gpufill request runs twice in one deployment: first right after deploy (cold "
            "facts, every function cold), then again (the first run's instances terminated, their capacity "
            "back in the market, its capacity signals cleared), ranking from the warm facts the first run "
            "kept, its functions still counted cold. A deployment refreshes its facts on a schedule by "
            "default (`facts_refresh_every`, every 5 minutes), so the warm run is the one a user meets: "
            "the time to fill above and the time goal are the warm run's, the first run's beside them; "
            "every other figure above is the first run's."
        ),
        "",
        as_markdown(header, body),
        "",
    ]


def render_pooled(
    per_seed: dict[int, list[Row]], example_rows: list[Row], *, signals: dict, score_noise: float, quick: bool = False
) -> str:
    """bench/results/report.md: every seed's generated markets pooled, with the spread, and one line per seed."""
    rows = [r for seed_rows in per_seed.values() for r in seed_rows]
    seeds = list(per_seed)
    markets = len(rows) // len(STRATEGIES)
    verdicts = judge(rows)
    per_seed_verdicts = {seed: judge(seed_rows) for seed, seed_rows in per_seed.items()}
    header = ["target", "pooled", "verdict", "by how much", "seeds where met"]
    body = []
    for i, v in enumerate(verdicts):
        met = sum(1 for vs in per_seed_verdicts.values() if vs[i].judged and vs[i].met)
        body.append([v.target, v.measured, f"**{v.word}**", v.margin, f"{met}/{len(seeds)}"])
    auc_seeds = ", ".join(f"{s}: {a:.2f}" for s, a in signals["per_seed"].items() if a is not None)
    parts = [
        "# gpufill scarcity benchmark",
        "",
        f"{len(seeds)} seeds ({', '.join(map(str, seeds))}), {markets} generated markets in all"
        + (" (`--quick`: a CI-sized subset)" if quick else "")
        + f", each met by {len(STRATEGIES)} strategies; placement score noise {score_noise} doublings. "
        "Reproduce with `make bench`; the same seeds give the same report. Every seed's own report, "
        "with every case and figure, is in `seed-N/report.md`.",
        "",
        "## What the public signals give away",
        "",
        f"AUC of each signal for \"this pool has capacity\" over the generated pools (0.5 = nothing, 1.0 = "
        f"an oracle): placement score **{signals['score']:.2f}** as generated (per seed {auc_seeds}), "
        f"**{signals['returned']:.2f}** as GetSpotPlacementScores returns it (capped at 3 for one or two "
        f"types, top 10 only); Spot Advisor tier **{signals['advisor']:.2f}**. The earlier generator "
        "(commit c999f8d) gave 0.88–0.91 per seed as generated and 0.63–0.72 as returned on seeds "
        "20261106–20261110: its per-AZ scores were computed from each pool's capacity.",
        *(
            [
                "",
                (
                    "The region-level score (`SingleAvailabilityZone=false`, the one gpufill's default ranks fleets "
                    f"with), as returned, for \"this region alone holds the request\": AUC **{signals['region']:.2f}**."
                ),
            ]
            if signals.get("region") is not None
            else []
        ),
        "",
        "## Targets (generated set, pooled over seeds)",
        "",
        as_markdown(header, body),
        "",
        "## Sums beside the medians",
        "",
        (
            "Per count bucket and pooled: launch calls summed over the markets (and the API that made them), "
            "mean and median per market; fleet $/h summed, and summed over the cheapest feasible fleets of the "
            "same sizes; modelled time to fill, mean and median."
        ),
        "",
        as_markdown(*pooled.totals_table(rows)),
        "",
        *_warm_section(rows),
        "## gpufill against each baseline, market by market",
        "",
        (
            "The sums on the markets both ran (fleet $/h: where both launched as many), the mean per-market "
            "difference (gpufill − baseline), on how many markets gpufill's figure was lower, higher or "
            "equal, and the two-sided exact sign test on the lower/higher split (ties dropped): the chance of "
            "a split at least that uneven if neither strategy were better."
        ),
        "",
        as_markdown(*pooled.paired_table(rows)),
        "",
        "## Lower bound and realistic floor on launch calls",
        "",
        (
            "The lower bound knows which regions are empty; on a market that cannot fill the request, a "
            "strategy without hidden knowledge must ask every region offering a requested type before it can "
            "stop short, so the realistic floor counts those calls there."
        ),
        "",
        as_markdown(*pooled.floor_table(rows)),
        "",
        "## Pooled headline: median (IQR, range) per case",
        "",
        "`calls ×lower bound` is launch calls ÷ the oracle's lower bound on launch calls (a fleet call "
        "counts 1); `fleet ×cheapest` is $/h ÷ the cheapest feasible fleet of the same size.",
        "",
        as_markdown(*pooled.headline_table(rows)),
        "",
        "## Per request size (count bucket): median [IQR]",
        "",
        as_markdown(*pooled.bucket_table(rows)),
        "",
        "## Per seed",
        "",
        "Total launch calls over the seed's markets, the median ratio to the lower bound, and gpufill's summed fleet $/h over the summed cheapest.",
        "",
        as_markdown(*pooled.seed_table(per_seed)),
        "",
        "![Launch calls and modelled time against scarcity](scarcity.png)",
        "",
        _how(),
    ]
    if example_rows:
        parts += [
            "## The hand-written markets (examples/)",
            "",
            as_markdown(*calls_table(example_rows)),
            "",
        ]
    parts += ["## Closing note", ""]
    for v in verdicts:
        parts.append(f"- **{v.word}** — {v.target}: {v.margin}.")
        if v.judged and not v.met and v.misses:
            shown = v.misses[:6]
            more = len(v.misses) - len(shown)
            parts.append("  Misses: " + "; ".join(shown) + (f"; and {more} more" if more > 0 else "") + ".")
    parts += ["", "Where gpufill's calls go (pooled):", ""]
    parts.extend(f"- {note}" for note in diagnosis.notes(verdicts, rows))
    broken = broken_runs(rows + example_rows)
    if broken:
        parts += ["", "Runs that ended in a way no market explains (their figures are not results):", ""]
        parts.extend(f"- {r.outcome.strategy} on {r.case.name}: {r.outcome.status}" for r in broken)
    parts.append("")
    return "\n".join(parts)
