"""Lesson 09 (model parallelism): the self-check quiz (``quiz(load_quiz("model_parallel"))``).

Answers and explanations are sealed (``ddl_lab.active.seal_choice`` /
``seal_number`` / ``seal_text``) so that they are not read at a glance; to change one,
seal the new text with those functions. Salt: ``"<slug>:<question number>"``.
"""
from ddl_lab.active import Question

QUESTIONS = [
    Question('ID2223 review question 2 (Teta & Zangis): in model-parallel learning, what is split across the machines, and what must they exchange?',
             choices=("the training data; each machine's gradients are averaged", "the model's layers (its weights); each layer's intermediate output is synchronised and stacked as the next layer's input", 'the optimizer state only; the parameters are gathered before every step', 'nothing; each machine trains its own model and the best one is kept'),
             salt='model_parallel:1', answer='0a45dfb4a09c2be5039040cfa59b3cabd4e234de2a34a81ec9cef8b7f064044a',
             why='KQsISABBEltSFR4VRQ4MFQJSFlAVBgFTTBsHDkQTCUQLCRZJAFwXV0dMRQkBF0VMGBYQUkwfChlECQ1OBAgMXwlUExRPDAJGGB0XSxwdBgAYBw4fRAUAQUwWDUhLVB0XABYNA08BBE0cTxhJAgZCCQUQD0VXQRZSRVQTGlQLEwcbGwpOCk8ST0wJABkTBR5JTAAMXgAAGhxJEEUBHRMBSRwBAVNMDAAGAUQOTA8KTBpzBB4QVBYMCAhSEUgcTxFBGA5PHA0QBA0YCQcaUxUfHAAVAA8IGhFTWQoDRR4WGAMBFgkNBRJCXkEAE1lQAxcHAx4ATBAcGABEAwoYFwsCDVxUSwEABxoYUgYMCAhSCk4VFlVUBApPBBQQBUAFGwdIAAcGGFQHRQ8cUj9FKyBYEUI='),
    Question("GPipe with p = 4 equal stages and m = 12 micro-batches: what fraction of a step is the bubble (the stages' idle share), ideally?",
             number='H0YaD1ZBUhQSWFJbVEBfRl9cVREE',
             why='TBRMz+TzQgsJW1oUAElFFk+Q7bJZXlwAUU9cRFVRTBBMUUwIABsUWVQKAEYcBgBQQ08BSAlPHwIUAQBEAgRCXEkYHgoABAoUTwJFwvH9VRFMAgYIFgtBTw0VAVIABx4WVBFFBwEWRUQLDhxOH08JBBZEHA2O6fAaEVQfFlIHS0YiHRdFWQIcQx4AQgkFEA9FCRJCSUgGGxdLQgwSVFISSQ0HVU1MUk9aRA0YDRsOF1ZEVBAcAFFKUkFSKEUeDgFSAwFCJylED0IZDxZJAAAaHAARBAsKUgxEFQpVVAUCCksFAw1EAhIWGlQcF1lJBgAHA1IRSRQKVU2u2EcfOwJMBkwVPVgJTlJRUEKH7v1SVAlWAlUdTFxAWlZEUQ1cT1APDg=='),
    Question('p = 4 stages, m = 16 micro-batches. At its peak, stage 0 under GPipe holds the activations of 16 micro-batches. How many under 1F1B?',
             number='H0YaD1ZBVhYAVgZbGkJVSF9DGA==',
             why='IggZXgQEBhoRMkM7AEo1Dx8XIVIcDhgNKgMaGAxITFkEBEJJQxwXHVUOAEYiFwJBDR0aTkEjIksRFwleRVtCSVQVFRwAEEUUGhwWAAlPl6j+Tx1Lhuz+DV1BFVtSGV8MUEIDCR0FBFIdHFkAGAcKBUQFAFkJEwxbVBEBWU8MAEYJHRdXGB0RAA0BC0sLCgkNDgABUVcVAB0aQgQSTx8KUw1PBQCO5/1LFkRRDVhBD1NDBh1UQgMRBQcXFgAYHRAABQFPDQgNC0UYQQ1UAAcGGEcHRVZDUhJIGBsQVgkdTwZEDR8DTDUKXwAWBxtCDgBGBgFFVBEKVVMNAgpLBRdMajwIEl8HB0lZVAoARgIXCE8LFlVJH08BBBBK'),
    Question('DistBelief (Dean et al. 2012): why do more partitions of one model eventually stop paying?',
             choices=("each machine's computation shrinks while the communication across partition boundaries does not (for dense layers it grows), so the network overhead takes over", 'a model cut into more pieces learns worse, so more steps are needed', 'locally connected layers need more communication than fully connected ones', 'the parameter server runs out of memory'),
             salt='model_parallel:4', answer='a678a9498b6fd22669b4f0bb54173b7bcb25fd04f4c1b9ec69c52ce0eab85c77',
             why='IA0fWS4EDlNFElIeQQsLFU8FDUkVClVUBApPBQEQG0IeCkJVVhEAEUUDAUYGAUVTFA4ZTFZPDAQJFBlZDRULVU5UAhxSQggHDBoMThxPE0EAAxxLBRdMHEMPThpCAQZZQUIDEwMeHAAaABtOCQwbDgBEAEwVBBAaThEXHVNCABAKABwAFhsdRR5PHwoWEAVZBQ4MHVNUEBVPAQ5KTwEKABAbBgABChwYBQMJXkwGEFVXVAUQVApFCEFSKU8aDhlMFU8MBAoKCU4YBAYaTRsWHEwRRQUaBkVGHBhVRQgIChhEBQJJTBEDSFQdBhBPDEUAGgARSBwdTgAYBwpLFgEfWAAVQlVGVAYRRUIGCQICEFQYGxxPAk8GGEQQBEhMEgNXRVQaFlcHEwMdUgxUWQYGAA8aG0U='),
]
