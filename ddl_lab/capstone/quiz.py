"""Lesson 15 (capstone): the self-check quiz (``quiz(load_quiz("capstone"))``).

Answers and explanations are sealed (``ddl_lab.active.seal_choice`` /
``seal_number`` / ``seal_text``) so that they are not read at a glance; to change one,
seal the new text with those functions. Salt: ``"<slug>:<question number>"``.
"""
from ddl_lab.active import Question

QUESTIONS = [
    Question('Plain synchronous SGD on 8 workers allreduces the fp32 CNN (9,930 parameters) at each of 100 steps. How many MB does each worker send, as the meter counts?',
             number='H0YaD1ZBVBQZQUNVAEARRFVSVQ5JWgg=',
             unit='MB',
             why='VVRcDQ0NDkhFEAcaRRFFpfhSVwgXjf2yXUZABUSn+w1YQSAa4+NSQAxbVlZPT0URSV9V4/tPXkVTUUzu+0FRAwxDQEkAIEWE5vpFFldWQAAhLVVLEAwJDR4IDF0HB1IKSAMXA08CAFJZGBpSBwodSwMWA1ofQRZVVxUAHVNCVzVPExYAF08SUgMYHEdECglbCRNCWEUNHRdETA=='),
    Question('With one worker, how many bytes does an allreduce of the whole model put on the wire?',
             number='H0YaD1ZBUhQQWFJbVEBfRl9cUF0=',
             unit='bytes',
             why='VkwCz+TzUxMPGlK7l0I2RlJSVQAfAAcAAk9SS1VeTFkEBBBfAB0BWU4NBwkLC0VUFk8BQQAETx8LSkx5BAAWGkkHUg5IG0USBxdFEVQYGlIHCh1LFgsbDQMHQk5IEVIKQwMJDwEVRVQYDRlFTBwKBQAXTEMDFQpTThNc'),
    Question('On skewed shards (each worker holds mostly a few digits), why does local SGD lose accuracy as its period grows?',
             choices=('The allreduce loses precision when it runs less often', "Between averagings each worker's model drifts towards its own digits, and the average of drifted models is a worse model", 'The learning rate is divided by the period', 'The mini-batches get smaller'),
             salt='capstone:3', answer='64321035d200a1ff1c0ee33846010e9b8141489a4b5af55a22640267290ba6fe',
             why='KAsPTABBMX1kUwFZUxYAFhxSBFIcTxpOABZPChdEC0IDBUJbU1QGEUVCFg4OAAEADQcQWUwcCg5fRANDTA8NVA09Oz0AEQ0HHRYWAA0HEAAeCh8HDQcNXkwRF1ZMVBMJQRARSk8BCgANBxAAHAodAgsATFkEABYaaT02WUQDEQdPBgpMHB0UVAkcTwIXRBhCA0EOVU4TUhFFEABGRx4AUwoAGwBcWkZF'),
    Question('Top-k sends 2 % of each update. What does error feedback do with the other 98 %?',
             choices=('Drops it: that is the price of compression', 'Sends it in fp16 instead', 'Keeps it in a residual that is added to the next update, so it is sent later', 'Sends it once at the end of training'),
             salt='capstone:4', answer='c2fe6d3ea0248e783c468ff49815195d271479232bb63da3d0de6b8c1dbcc999',
             why='KgsYRQUPBRpJB1IVTxERSk8dC0wATxFFAA4WDgBERGwGCEIcADwXGEYLAAoLUlcQSFhOAAAKHBgLCkwdVEhYGkFUARRBDglGChwRUgBPElIDGBxLDQpMWQQEQkhFBxsdVQMJRhocEUkVTxxUTAYcSwUJA0MLQRZSRVQeGFIFABUbUgROHU8BUg0ZCgcXSg=='),
    Question('Why does the capstone count bytes in the process group instead of asking the plan how much it sent?',
             choices=("A plan's own count misses what it does not see: DDP's C++ reducer, a library's collectives, a parameter server's answers", 'Counting in the plan would be slower', 'The plan cannot know its rank', 'torch.distributed forbids counting'),
             salt='capstone:5', answer='8133d84e53b188ec592a266fb491c0004403e16b0536ca9a34700cf99e6cbe7e',
             why='JwsZQxhBA04AABocABIXCQwXFlNZCAdPGR9DSwoLGA0FD0JOSBFSCUwDC1xPBg1FWQIQVAkdTxwWBRxeTBUKXwAQFx9BFwkSTxUXTwwfWQAfAE8OEgECDSglMh1TVAAcRBcGAx1SBE4dTxxUH08HBAsPHw0NEwcaQxwTC0cHAUpPBQ1BDQoDRR5PGwMBRBxBDQ9CWEUYGxxWBxZGBgZFUxwBAQCO7/tLAQUPRUwCA1ZMVAURQRZFCgoBFk8XT0UWSxxPGQ0KCw1EDhAaVBwXWU0DEQUHGwtHWQwaTAAKDB8NEgkETAwDUUUHUhgAFQoUBBcXAAoKG0RATw0SRAIDXwEUDlsABhMNSAcXRhsaBE5ZDQwADw4fHxEWBUMLQRZSRVQcHFQVChQEXA=='),
]
