# Run on the quiet 16-core device host (tokenizers 0.23.2), in a checkout: fixtures only. Output lines: threads round tokenizer corpus cache_capacity encode_cpu_s
cat > /tmp/c.py <<'P'
import ctypes,gzip,json,sys,time
from tokenizers import Tokenizer
tk,cor,cap=sys.argv[1],sys.argv[2],int(sys.argv[3])
F='fixtures/data/'
if cor=='chat':
 T=[''.join(f"<|im_start|>{m['role']}\n{m.get('content') or json.dumps(m.get('tool_call'))}<|im_end|>\n" for m in json.loads(l)['messages']) for l in gzip.open(F+'taskmaster4_chat_200.jsonl.gz','rt')]
elif cor=='gsm':
 T=[(lambda d:d['question']+'\n'+d['answer'])(json.loads(l)) for l in open(F+'gsm8k_train_200.jsonl')]
else:
 T=[x[i:i+2000] for l in gzip.open(F+'peps_long5.jsonl.gz','rt') for x in [json.loads(l)['text']] for i in range(0,len(x),2000)]
t=Tokenizer.from_file(f'fixtures/tokenizers/{tk}/tokenizer.json')
if cap!=10000:t.model._resize_cache(cap)
t.encode_batch(['warm']*64,add_special_tokens=False)
B=[T[i:i+64] for i in range(0,len(T),64)]*int(sys.argv[4])
c=time.process_time()
for b in B:t.encode_batch(b,add_special_tokens=False)
print(round(time.process_time()-c,3))
P
for th in 16 4; do lo=$((33554432/(th*8704))); for r in 1 2 3 4 5 6; do for tk in gpt2 mistral-7b-v0.1; do for cor in chat gsm peps; do
 [ $tk = mistral-7b-v0.1 ] && [ $cor = peps ] && continue
 for cap in 10000 $lo 0; do
  x=$(RAYON_NUM_THREADS=$th python3 /tmp/c.py $tk $cor $cap 30); echo "$th $r $tk $cor $cap $x" >> $OUT/ab.txt
 done; done; done; done; done
wc -l $OUT/ab.txt
