"""Module dependency cycles of a crate, from `crate::` paths in code (comments and test modules left out)."""
import os,re,collections,sys
root_dir=sys.argv[1] if len(sys.argv)>1 else '.'
os.chdir(root_dir)
mods=set()
def node_of(path):
    p=path[2:-3] if path.startswith('./') else path[:-3]
    if p.endswith('/mod'): p=p[:-4]
    if p=='lib': p=''
    return p.replace('/','::')
files=[]
for root,_,fs in os.walk('.'):
    for f in fs:
        if f.endswith('.rs'):
            files.append(os.path.join(root,f)); mods.add(node_of(os.path.join(root,f)))
def resolve(path):
    parts=path.split('::')
    for i in range(len(parts),0,-1):
        c='::'.join(parts[:i])
        if c in mods: return c
    return ''
edges=collections.defaultdict(set)
for f in files:
    node=node_of(f)
    txt=open(f).read()
    txt=re.split(r'#\[cfg\(test\)\]\s*mod tests',txt)[0]
    txt='\n'.join(l.split('//')[0] if not l.strip().startswith('//') else '' for l in txt.split('\n'))
    for m in re.finditer(r'crate::((?:\w+::)*\w+)',txt):
        t=resolve(m.group(1))
        if t and t!=node and not node.startswith(t+'::'): edges[node].add((t))
    # super:: references
    for m in re.finditer(r'\bsuper::((?:\w+::)*\w+)',txt):
        base=node.split('::')[:-1] if not f.endswith('mod.rs') else node.split('::')[:-1]
        t=resolve('::'.join(base+[m.group(1)]) if base else m.group(1))
        if t and t!=node and not node.startswith(t+'::'): edges[node].add(t)
top=collections.defaultdict(set)
for a,bs in edges.items():
    for b in bs:
        ta=a.split('::')[0]; tb=b.split('::')[0]
        if ta!=tb and ta and tb: top[ta].add(tb)
for k in sorted(top): print(k,'->',' '.join(sorted(top[k])))
idx={}; low={}; st=[]; on=set(); sccs=[]; c=[0]
sys.setrecursionlimit(10000)
def sc(v):
    idx[v]=low[v]=c[0]; c[0]+=1; st.append(v); on.add(v)
    for w in edges.get(v,()):
        if w not in idx: sc(w); low[v]=min(low[v],low[w])
        elif w in on: low[v]=min(low[v],idx[w])
    if low[v]==idx[v]:
        comp=[]
        while True:
            w=st.pop(); on.discard(w); comp.append(w)
            if w==v: break
        if len(comp)>1: sccs.append(comp)
for v in sorted(mods):
    if v not in idx: sc(v)
print("cycles:",len(sccs))
for s in sccs:
    print('  ',' <-> '.join(sorted(s)))
    for a in s:
        for b in sorted(edges[a]):
            if b in s: print('      ',a,'->',b)
