#!/usr/bin/python3
"""Optuna's side of bench/search_peers: an ask/tell server on stdin/stdout.

JSON lines, one request then one reply (the C++ driver trains and validates
every trial through its task oracle, bench/search_tasks.h; this process only
proposes hparams and decides on pruning):

  {"op":"init","sampler":"random|tpe","pruner":"none|hyperband|sha","seed":S,
   "direction":"maximize","space":[{"name":..,"kind":"log|int|double|index",
   "low":..,"high":..}],"min_resource":16,"max_resource":256,
   "reduction_factor":4}                          -> {"ok":true}
  {"op":"ask"}                                    -> {"trial":N,"params":{...}}
  {"op":"report","trial":N,"step":L,"value":V}    -> {"prune":bool}
  {"op":"tell","trial":N,"state":"complete|pruned","value":V} -> {"ok":true}
  {"op":"close"}                                  -> {"ok":true}, exit 0

Any error: {"error":"..."} and exit 1. Standard library and optuna only
(Debian's python3-optuna, Optuna 3.1; run it with /usr/bin/python3).
"""
import json
import math
import sys

MAX_LINE = 1 << 20


def reply(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def fail(message):
    reply({"error": message})
    sys.exit(1)


try:
    import optuna
except ImportError as e:  # answer the first request with the reason
    sys.stdin.readline(MAX_LINE)
    fail("cannot import optuna (%s): install python3-optuna (deploy/install-deps.sh)" % e)

optuna.logging.set_verbosity(optuna.logging.WARNING)


def make_study(req):
    seed = int(req["seed"])
    sampler_name = req.get("sampler")
    if sampler_name == "random":
        sampler = optuna.samplers.RandomSampler(seed=seed)
    elif sampler_name == "tpe":
        sampler = optuna.samplers.TPESampler(seed=seed)
    else:
        fail("init: field 'sampler' must be random or tpe, not %r" % sampler_name)
    pruner_name = req.get("pruner", "none")
    rf = int(req.get("reduction_factor", 4))
    if pruner_name == "none":
        pruner = optuna.pruners.NopPruner()
    elif pruner_name == "hyperband":
        pruner = optuna.pruners.HyperbandPruner(min_resource=int(req["min_resource"]),
                                                max_resource=int(req["max_resource"]),
                                                reduction_factor=rf)
    elif pruner_name == "sha":
        pruner = optuna.pruners.SuccessiveHalvingPruner(min_resource=int(req["min_resource"]),
                                                        reduction_factor=rf)
    else:
        fail("init: field 'pruner' must be none, hyperband or sha, not %r" % pruner_name)
    if req.get("direction", "maximize") not in ("maximize", "minimize"):
        fail("init: field 'direction' must be maximize or minimize")
    # A study name fixed by the seed: HyperbandPruner assigns a trial's
    # bracket from a hash of the study name and trial number (a random name
    # would make a run irreproducible; one name for every seed would give
    # trial n the same bracket on every seed).
    return optuna.create_study(study_name="search_peers_%d" % seed, direction=req.get("direction", "maximize"),
                               sampler=sampler, pruner=pruner)


def distributions(space):
    if not isinstance(space, list) or not 1 <= len(space) <= 16:
        fail("init: field 'space' must be a list of 1..16 dimensions")
    out = {}
    for i, d in enumerate(space):
        name, kind, low, high = d.get("name"), d.get("kind"), d.get("low"), d.get("high")
        if not isinstance(name, str) or not name or not all(isinstance(v, (int, float)) for v in (low, high)):
            fail("init: field 'space[%d]' needs a name, low and high" % i)
        if kind == "log":
            out[name] = optuna.distributions.FloatDistribution(low, high, log=True)
        elif kind == "double":
            out[name] = optuna.distributions.FloatDistribution(low, high)
        elif kind in ("int", "index"):
            out[name] = optuna.distributions.IntDistribution(int(low), int(high))
        else:
            fail("init: field 'space[%d].kind' must be log, double, int or index, not %r" % (i, kind))
    return out


def main():
    study, dists, trials = None, None, {}
    while True:
        line = sys.stdin.readline(MAX_LINE)
        if not line:
            return 0  # the driver went away
        if not line.endswith("\n"):
            fail("a request longer than %d bytes" % MAX_LINE)
        req = json.loads(line)
        op = req.get("op")
        if op == "init":
            study, dists = make_study(req), distributions(req.get("space"))
            reply({"ok": True, "optuna": optuna.__version__})
        elif study is None:
            fail("the first request must be init, not %r" % op)
        elif op == "ask":
            t = study.ask(dists)
            trials[t.number] = t
            reply({"trial": t.number, "params": t.params})
        elif op in ("report", "tell"):
            t = trials.get(req.get("trial"))
            value = req.get("value")
            if t is None or not isinstance(value, (int, float)) or not math.isfinite(value):
                fail("%s: unknown trial %r or a value that is not a finite number" % (op, req.get("trial")))
            if op == "report":
                t.report(value, int(req["step"]))
                reply({"prune": bool(t.should_prune())})
                continue
            state = req.get("state")
            if state == "complete":
                study.tell(t, value)
            elif state == "pruned":
                study.tell(t, state=optuna.trial.TrialState.PRUNED)
            else:
                fail("tell: field 'state' must be complete or pruned, not %r" % state)
            del trials[t.number]
            reply({"ok": True})
        elif op == "close":
            reply({"ok": True})
            return 0
        else:
            fail("unknown op %r (init, ask, report, tell, close)" % op)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (ValueError, KeyError, TypeError) as e:
        fail("bad request: %s" % e)
