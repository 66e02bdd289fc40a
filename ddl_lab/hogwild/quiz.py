"""Lesson 03 (Hogwild!): the self-check quiz (``quiz(load_quiz("hogwild"))``).

Answers and explanations are sealed (``ddl_lab.active.seal_choice`` /
``seal_number`` / ``seal_text``) so that they are not read at a glance; to change one,
seal the new text with those functions. Salt: ``"<slug>:<question number>"``.
"""
from ddl_lab.active import Question

QUESTIONS = [
    Question('Why can Hogwild! drop the lock on sparse problems?',
             choices=('Python makes numpy writes atomic', 'Updates touch few coordinates, so they rarely overlap, and reading a slightly stale θ costs little', 'The workers take turns', 'Each worker owns its own copy of θ'),
             salt='hogwild:1', answer='cf4a190b83d46025ce23343b0dae5715ac612bfbe0b7c18764ce798c66868726',
             why='Kg0ZAUwzB1lIAF5ZcqHMRklSMlIQCB1UTEddW1VVRQ0NEhFPTRFSDUgDEUYKEwZIWRwcTgsDCkYHCwNfCAgMW1QRUgxQBgQSClIMU1kOAU8BBgxLTAoDDRsTC05FVBsKAA4KFRtbRUEXC1VCAxoBD0QQBEhMBARcRRcGWU8ERRUbEwlFWR0QQQgcVUsTDRhFTBISW1IHF1lVEgEHGxcWACooMQAPAAEdARYLSB9BDF9BBh4AAAMWRgYURVIMAVVTCR0GCggIFQFMFgtOSFQcHEEQSAoGHABBC08GUAkKCx4USkxDGQwSQwcHUreYOQwCFy9FwvH9SAAfGwobRA0fDQIOFhpBAB0USQFJRhwdRUwcHAZPAk9fWEQFAF4DQQFVVRoGCgAOChUbUhZUHB8GAI7v+0sFRAFIDRIXSEUZFxdUQgoTGwEMRBxPAUgJTx8KFAEeCh9BD1VEER5X'),
    Question('On 2 free cores, 2 lock-free workers vs 2 workers that take a lock around every update: which reaches the target loss first?',
             choices=('lock-free', 'locked', 'the same time'),
             salt='hogwild:2', answer='af9f884b47d2def915ab6055fee98fd66a5006a5866b822519a2b969f60f736c',
             why='JUQAQg8KQltSGwcXREIAEAoAHAAMHxFBGApPGAEWBUwACBFfU1QGEUVCEgkdGQBSCk8UTghPDg8AF0xZBARCVk8XGV5TQgoRAVIGTwobTwAAAAwAAQBMXxkPERpBBhdZTwQRAwFSFkwWGBBSTBsHCgpEA0MJQRJITxcXClNM'),
    Question('Why does a dense problem share badly between cores even without a lock?',
             choices=('The GIL', "Every write invalidates the cache line in the other core's cache", 'Dense vectors do not fit in shared memory', 'The barrier'),
             salt='hogwild:3', answer='fa3a89873e12b39b2c44abed152bbc5a33c0b8ae764fe1e51dbd393a02090b56',
             why='JwUPRQlBAVVIEQAcTgEAXE8XBEMRTwJSBRsKSxALTOPUQQ9bSxEBWVQKAEYABg1FC08WTx4KHEsWAUFLCRUBUgAAGhhUQlNSQhAcVBxPGUkCCkNLFwtMQQ0TBV8AAQIdQRYAFU8BFUUXC1VUBApPGAEHA0MIQQFVUhFVCgAWDAsKUghPDwYbR0wMDggMAUxBBQ8HSQ4='),
    Question("Gradients applied 16 updates late (computed from a stale θ): what happens to training on the lesson's problems?",
             choices=('It diverges', 'It barely changes', 'It stops learning at all', 'It becomes 16× faster'),
             salt='hogwild:4', answer='a1c53f355f28367117418bf624cf10d10bdca7b833882f228a294753df258049',
             why='RjcAQhtBDl9BBhwcUhFFBx0XRUYYHAECTEcjCgoDCkIeBU4acxkdFUFCQ0Y1GwtLHBkcQwRPXVtUXUUXTABCSU0VHhUABgAKDgtFQxYcAVNMAwYfEAgJFkwAQlZBBhUcAA0LA09aVBJBRlVIGR0bGEQTBEgeBEJPUBATDUURRRYGHgAAFgEBT0wbBw5EFw1ACUEBVU8GFhBOAxEDHFw='),
    Question("PyTorch's way to run Hogwild! with a torch model is …",
             choices=('model.share_memory() and an ordinary optimizer in each worker process', 'DistributedDataParallel', 'torch.distributed.all_reduce after every step', 'a parameter server'),
             salt='hogwild:5', answer='fa1ada80fe538cccd89891527319e9fcef8d05f3206d1cef0b6bf2ecef84f2ec',
             why='FwwNXwk+D19NGwAACEtFCwAEAFNZGx1FTB8OGQUJCVkJExEaSRoGFgARDQcdFwEAFAoYTx4WVEsBBQ9FTBEQVUMRAQoAFxUCDgYAU1kbHUUBTwYFRBQATA8EQk1JABpZTg1FCgARDgBRHwxUAx0MA0sBFEwBEQ5fU1QfF0kRETkHHQJXEAMRCUI='),
]
