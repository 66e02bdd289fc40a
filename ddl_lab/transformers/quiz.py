"""Lesson 12 (transformers): the self-check quiz (``quiz(load_quiz("transformers"))``).

Answers and explanations are sealed (``ddl_lab.active.seal_choice`` /
``seal_number`` / ``seal_text``) so that they are not read at a glance; to change one,
seal the new text with those functions. Salt: ``"<slug>:<question number>"``.
"""
from ddl_lab.active import Question

QUESTIONS = [
    Question('Megatron tensor parallelism over t = 4 ranks; one (b, s, h) activation is A bytes. How many bytes (in units of A) does one rank put on the wire for one transformer block in one training step, forward and backward, in the ring model?',
             number='H0YaD1ZBVBQQWFJbVEBfRl9cVREE', unit='×A',
             why='MBMDDQ0NDkhFEAcaRRFFCQlSJAAfAAdXDR0LS0wDTEwKFQdIAAAaHAADERIKHBFJFgFSU0wOAQ9EEARITCwuagcHUgtPFUgWDgAETBUKGQAADhYOFhdFDQ0PBhpUAx1ZQgMGDRgTF0RZRxMADgoJBBYBTFkEBAtIABcdFVUPC0sfExdBFQMQTEwDDhIBFh8EVkFWGkEYHgtFBhAFCgFJABwOFkhMXUcfRIbkv0xQSxVUVLDOACNFW09DSxVZLlVJAk8OSxYNAkpWQVQaYVo='),
    Question('What does sequence parallelism (Korthikanti et al. 2022) cost in bytes, beside plain tensor parallelism of the same degree?',
             choices=('the same bytes for the activations: each allreduce becomes a reduce-scatter and an all-gather, which together move what the allreduce moved (plus small allreduces of the LayerNorm and bias gradients)', 'twice the bytes: it adds an all-gather and a reduce-scatter to every allreduce', 't times fewer bytes, because the activations are sharded', 'nothing at all, because LayerNorm and dropout need no communication'),
             salt='transformers:2', answer='47f1ad8bcba2a8b6c4d79bda66918d39f465b7591bc65d867d8120aeefa83b4e',
             why='JUQeRAIGQltMGAAcRBcGA08bFgAYTwdFCBoMDkkXD0wYFQdIABIdFUwNEgMLUgdZWQ4bAA0DA0YDBRhFCRNCEkwRAQpPDEVWWVtLACoKBFUJAQwORBQNXw0NDl9MHQEUAA0LChZSCE8PCgYAGAcKSxcBD0ICBUJSQRgUWVQNRRIHF0VPDQcQUkwcBg8BRANLTC0DQ0UGPBZSD0UHARZFRAsABU8ZG0NLFwtMWQQOEV8ABhceSQ0LFU8FClISTxpOTBxAH0QLCg0YCQcaVBsZHE4RX0YbGgAACg4YRUwNFh8BF0ANGEEWU00RAVlMBxYVTx8ATRYdDAAYBwoZAUo='),
    Question('Causal ring attention on n = 4 ranks, rank r holding the r-th contiguous quarter of the sequence, no balancing: which rank computes the most query-key scores?',
             choices=('rank 3, the last quarter: its queries see every earlier key, (r + 1) of the n blocks', 'rank 0, the first quarter', 'all ranks compute the same', 'ranks 1 and 2 in the middle'),
             salt='transformers:3', answer='e75f58caaf8fbc72913479540289d44e8cfa55e0e78c9c5d7542766df963d51d',
             why='MQoISB5BAxpDFQcKQQ5FCw4BDgAYTwRVCR0WSwUQTF0DEgtOSRscWUlCBBIbFwtECk8BT0wEChIXRFwDQghMGnIVHBIAEEIVTwMQRQsGEFNMDAAGAUQNSxgEEBpCGB0aSxFFVkFcFwCb5+cAXU8YAwsICQ0NDwYaSQABWU8VC0YNHgpDEk8dQQAJVUsTCx5GTAYQVVcHUg5JFg1GHV5FQRcLVVQECk8ZDQoLDRsAC05TVBQWUkIRDgpSFkwWGBBTGE8dCgoPQA0eAAxRABpSm6jwRVdB'),
    Question('Zig-zag balancing: with n = 4 ranks the sequence is cut into 8 chunks and rank r holds chunks r and 7 − r. The most work any rank does, zig-zag over naive (contiguous quarters), causal, is what ratio?',
             number='H0YaD1ZBUhQVQkBMDEJHEk1IRRBXX0Rd',
             why='KgUFWwlNQlhMGxESU0IKAE8BSk5ZHxpTBRsGBAoXVg0eAAxRABpSm6jwRVdPEQpNCRoBRR9PAUsQDQBIH0ENXABcAVZOS6fUTwEGTwsKBgBEBhsYRAAFTAsODFtMVAYQTAdFEQcdCUVVTwFICQFPBgUXB0gISE4aTrbFUVNNC0+twEsAIwYSDRYOCEdEBwRYAgoRGk8SUgoPUAtcTxcTRQsWVVINAQRLBwsBXRkVB0kAABocABEECwpSV05ZRFURTBsGBwEXTEIKQUpJD0YcUOLQS0Y7GgAACw4BSQNPBhhETF5DTEpCCwlbWk1OS0VbT0tKEU9Pl6nkT19FUVJMTBhBDBodVEZVAAMLAk8GAE4dHFVUA09eRFZEDV5MD0JdUhsFCg4='),
    Question("Online softmax: a rank holds a running max m, a running sum z of exp(score − m) and an unnormalised output o. A new K/V block raises the max to m' > m. What happens to z and o?",
             choices=("both are multiplied by exp(m − m') before the new block's terms are added; at the end o / z is the exact softmax-weighted sum", "they are kept as they are; only the new block's terms use m'", 'they are reset to zero and the earlier blocks are recomputed', 'z is rescaled but o is not, because o is divided by z at the end'),
             salt='transformers:5', answer='e363127eaa9faf649342a203ad37a9b028dd124bdafd630509b827d7569e4761',
             why='IRIJXxVBB1tSGBscUkIRAx0fRVcYHFVFFB9HGAcLHkhMg+qoABlbQgAVDBIHUhFIHE8bRRtPAgocRAVZTAwXSVRUEBwABx0WRwEGTwsKVcLk/U8GQ01MEEwEGkoIBxEWUgdFhOfgRU1QrcJFFB9HBkSG5L9MDEUTDlQgHFMBBAoGHAIAA08UTghPAEsGHUxZBAAWGk8aF1lGAwYSAABFSxwKBVNMChkOFh1MWQkTDxpDGxwKSRERAwEGSQAKAFVOA08NBwsHBw0FEkJfVhEAWUMNCBYaBgBEWRsCSQ8KQQ=='),
    Question('DeepSpeed-Ulysses (Jacobs et al. 2023) swaps sequence shards for head shards with all-to-alls. What limits how many ranks it can use, that ring attention does not have?',
             choices=('the number of attention heads: each rank must get at least one whole head', 'the sequence length must be a power of two', 'the vocabulary size', 'nothing: it scales to any number of ranks'),
             salt='transformers:6', answer='e40bd522d85c2666113cc8b8a63b2b88a39f867e651d515b5940cdbdd7ad6897',
             why='JQIYSB5BFlJFVBMVTE8RCUITCUxZChRDBE8dCgoPTE4DDBJPVBEBWUYXCQpPExFUHAEBSQMBTwQSAR4NGAkHGlccHRVFQhYDHgcAThoKVUYDHU8CEBdMRQkABkkMVAEWAAxFFA4cDlNZARBFCE8OH0QICUwfFUJUABwXGEQRRU4ABxcADAMMUx8KHDQFEBhIAhULVU5UABxGFxYDHFIITwsKVVINAQQYRBAETAJBCl9BEAFQDkI3DwEVRUENGxBOGAYABUQXHEEFFREaVBwXWVMHFBMKHAZFWQYBUwkDCUsFCggNBAARGk4bUgpVAQ1GDR0QTh1DVUIZG08YAQoIXkwqTWwAGlKbqPBFV08GDE0cHFs='),
]
