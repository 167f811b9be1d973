import sys, collections, re
sys.path.insert(0, '.')
import test_fuzz as tf
from hypothesis import given, settings, HealthCheck
import zarchive
tally = collections.defaultdict(collections.Counter)
def classify(data):
    try:
        zarchive.read(data); return "ok"
    except zarchive.ZArchiveError as e:
        msg = re.sub(r"\(.*", "", e.message)[:50]
        return f"{type(e).__name__}: {msg}"
for name in sys.argv[1:]:
    fn = getattr(tf, name).hypothesis.inner_test.__wrapped__
    strategies = getattr(tf, name).hypothesis._given_kwargs
    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(**strategies)
    def t(**kw):
        tally[name][classify(fn(**kw))] += 1
    t()
for k, c in tally.items():
    print(k)
    for m, n in c.most_common(25): print(f"   {n:4d} {m}")
