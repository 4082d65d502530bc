from partitioner import Problem, solve
c=lambda f: {"fwd_ms": f, "bwd_ms": 0.0, "weight_bytes": 0, "act_bytes": 0}
doc={"version":1,"cluster":{"nodes":2,"gpus_per_node":2,"gpu_memory_bytes":25,"intra_node_GBps":0.001,"inter_node_GBps":0.0005,
 "levels":[{"name":"t","GBps":0.00025}]},"training":{"microbatches":1},"stages":{"min":1,"max":2},
 "layers":[{"name":"l0","module":"m","out_bytes":0,"costs":{"dp1tp2":c(0.5)}},{"name":"l1","module":"m","out_bytes":0,"costs":{"dp1tp2":c(0.5),"dp1tp1":c(1.0)}}]}
p=Problem.from_dict(doc)
print(solve(p,"brute").to_dict())
from partitioner.solvers.dp.solver import DPModel
m=DPModel(p); m._budget=2**31; m._deadline=None
a=m._automaton_for("offsets"); print(m.sizes, a.states, a.init, a.accept, a.categories, a.trans, a.incoming)
print(solve(p,"dp").to_dict())
