"""What the page says about itself: the opening lines, and "How to read this page", the one glossary
(docs/page.md holds the same text; a test keeps the two equal)."""

INTRO = """\
# A small model writes, a big model steps in

A small, fast language model writes the answer one **token** (a word or a piece of a word) at a time.
Where it is unsure of its token, a bigger, slower model writes that token instead.
Tokens the big model wrote are shown in <span style="color:#c62828;font-weight:600">red</span>;
hover any token to see who wrote it and how sure each model was.
"""

HOW_TO_READ = """\
### How to read this page
- **Perplexity** says how unsure a model is of a token: 1 means certain, 5 means about as unsure as picking
  among five equally likely words. The chart shows, for every token of the answer, the small model's
  perplexity of the token *it* chose there (on a log scale), coloured by which model finally wrote it.
- **How much the big model writes** is the main setting: a share of the tokens (10% to start). The small
  model hands the big model the tokens it is least sure of, about that share of them: the threshold moves
  as the answer is written to keep the share, starting from a calibration the project ships for the small
  model where it has one. "More about this run" says which threshold the share meant for that answer. A
  larger share is slower and closer to the big model's text. Tick "Set a threshold instead" to fix the
  threshold yourself.
- **The threshold** is the dashed line (a step line when a share moved it). Where the small model's
  perplexity is above it, the token goes to the big model. A low threshold asks the big model more often
  (slower, closer to the big model's text); a high one leaves more to the small model.
- **The rule** ("How the small model judges its own token") says which number is compared with the
  threshold: how unsure the small model is of the token it chose (its perplexity, the seed's rule), how
  spread out its guesses are over every token (their entropy, in nats: 0 = one certain guess), how close its
  two best guesses are (the margin between their probabilities: 1 = certain; here the big model writes where
  the margin is *below* the line), or a learned router's predicted probability that the big model would
  choose another token. The slider and the chart switch to the chosen rule's units. The page starts with
  perplexity, the rule this demo was built around. The learned router is offered where the project ships one
  for the loaded small model (it recognises the file, not its name: today Qwen2.5-Coder 0.5B Q4_K_M); the
  line under the dropdown says which pair a router was trained on.
- **What-if:** after a run, move the share (or the threshold), or choose another rule. The text and the
  chart re-colour the recorded tokens to show which ones *would* have gone to the big model at the new
  share or threshold, or by the other rule; a share replays how its threshold would have moved, token by
  token. This re-reads the numbers the run recorded; nothing is regenerated, so it cannot show how the
  text itself would change. Press Generate to really run that way.
- **Struck-through** tokens (BiLD and speculative policies) were drafted by the small model, then
  refused by the big model when it checked them. Where the small model was unsure and handed a token
  over, its own proposal is not shown in the text; hover the red token to see it.
- **Purple** tokens (lookup policies) cost no model a thing to propose: where the text's last few tokens
  had occurred before, in the prompt or the answer, what followed them there was copied as a proposal,
  and the big model checked it as it checks the small model's drafts. Copying pays where an answer
  repeats its prompt: rewriting a text, correcting code, extracting fields.
- **The summary** is one sentence over the answer: how many tokens the big model wrote, how long the answer
  took, and how long the big model alone takes. Under it, "Where the time went": a bar of this run's seconds
  by who spent them (the small model in blue; the big model reading, in light red, and writing, in red;
  choosing who writes, in grey; the big model's scoring after the answer, lightest, not part of its time),
  and beside it the big model alone's bar. Reading is the big model taking several tokens in one go: the
  prompt, and the small model's tokens it checks or catches up on (each such read also writes the token
  after them); writing is one token at a time. Hover a part to see its seconds. Everything else the page
  measured is in "More about this run", closed under the picture.
- **Time and speed** are measured on the machine running this page, for this run; nothing here promises
  one. An answer's time runs from the start of its generation to its last token, reading the prompt
  included, and every speed (tokens/s) counts that same time. "More about this run" says when the first
  token came, and how much of the time each model worked. Until you compare, the big model alone's time is
  an estimate from the speeds measured on this machine, at loading and by every run since (its bar is
  hatched): the prompt read in one batch, then one big-model step a token;
  "Compare with the big model alone" runs the big model by itself on the same prompt and settings, measures
  it, redraws its bar from the measurement, and shows both speeds and where the two texts differ.
- **One run at a time.** Stop ends your answer or your comparison at once, even pressed the moment after
  Generate; what was written stays, as a stopped run. A new Generate (a fork, a follow-up) ends a comparison
  still running and removes its box before the new answer starts.
- **Scoring:** the big model says how close the text is to what it would have written: the share of
  tokens at which it would have chosen the same token itself, and its perplexity of the text (how
  surprised it was by the text on average: 1 means it expected every token). It keeps its view of every
  token it reads while writing (catching up on the small model's tokens included), so once the answer is
  finished it reads only the last few tokens it never read, as a step of its own with its own time (not
  counted in the answer's time or speed). That view also gives its likeliest tokens at every position.
- **Which rule decides best?** After a comparison, the small model reads the big model's own text once,
  and for every rule the page sweeps its threshold: how many tokens the big model would have to write
  (across) for how much of the text to be the big model's own (up). Up and to the left is better. The star
  is your run; the dashed line is this machine's break-even: left of it, sharing the work is faster than
  the big model alone, by the costs measured here.
- **Where does sharing pay?** A small chart from the project's own measurements on one reference machine:
  for each size of big model, how fast the small and the big model write together when the big model
  writes 10% of the tokens, against that big model alone (above the red line, sharing saves time). Filled
  points were measured, open ones predicted from the models' measured costs; a diamond is a stand-in, a
  file of the real model's shape with random weights, whose speed is real and whose text is not. The star
  is this page's pair, predicted from the costs measured here when its models loaded.
- **Does sharing keep the answers right?** In "More about this run", one sentence gives pass rates measured on
  coding problems (the share of problems whose answer passed its tests): the big model alone, the small one,
  and the measured way of sharing nearest your settings, with its speed. They come from the files the project
  ships (written by `python -m cascade tasks`), name the models measured and the date; for another pair of
  models (a bigger big model) it says that no pass rate was measured for it. Agreement with the big model is not the same as being right: this is.
- **What each model considered:** hover a token to see the small model's five likeliest tokens there
  and, where the big model read that position (it wrote the token or checked it), the big model's five,
  with their probabilities; the token in the text is marked ▸. Where the big model never read a position
  (the small model wrote it alone), its list is absent, and the table says so.
- **Fork from a token:** click a token, then choose one of the listed tokens. A new run starts with the
  text before that token and your choice as its given start ("The answer starts with", in grey), with the
  same settings, and writes on from there. **Branches of this session** lists every run: a fork says which
  run it came from, at which token, and what it chose instead. Choose a branch to show its text, chart and
  numbers again; nothing is regenerated. A link or a run file of a fork carries its start, so it replays.
- **Ask a follow-up:** in chat mode, under a finished answer, type a question about it. Both models read
  the whole conversation first, then write the new answer under the earlier ones, which keep their colours;
  the chart and the numbers are the new answer's. Each follow-up is a branch too: press "show its chart"
  by an earlier question (or choose its branch) to see that answer's chart and numbers, or to ask or fork
  from there. "New conversation" starts afresh. A conversation that
  has grown past what the models can read at once is refused, with both sizes named; nothing is left out
  without telling you.
- **The answer starts with** (under "System message and the answer's start"): text you give as the start
  of the answer, such as a code fence; both models read it and write on from it, neither writes it, and it
  is shown in grey. The system message sets the assistant's role in chat mode.
- **Share:** "Copy link" gives an address that opens this page with the same settings (greedy or seeded
  runs then write the same text), a follow-up's conversation included, unless that makes the address too
  long. "Download this run" keeps the run in one file that opens in any browser, without this page, with
  the earlier questions and answers of a conversation.
"""
