"""`textworld_express`: TextWorldExpress games (CoinCollector, Cooking, TWC) as an env.

TextWorldExpress (`pip install textworld-express`, Apache-2.0) reimplements TextWorld's
CoinCollector and Cooking games and TextWorld Commonsense in Scala, about a thousand times
faster (a step here: 0.1-0.4 ms). Its wheel bundles the Java program; it needs a Java runtime.

    env:
      name: textworld_express
      max_turns: 30
      args: {game: coin, num_locations: [4, 7], include_doors: false}

Actions: one tool, `act(command)`, with the command as free text ("move north", "cook
carrot in oven"), not one tool per verb. The games' parser is the arbiter of what a command
is: verbs differ per game (coin: move, open door, take; cooking adds read, slice, dice,
chop, cook, prepare, eat), a verb's objects are the game's own names ("red hot pepper"),
and the parser answers anything else with "Unknown action" at no cost to the game state.
A tool per verb would split one command over a tool name and arguments the parser joins
again, change the tool list per game, and make a 135M policy learn a dozen call formats
where one carries the same information; the literature's agents emit the command text too.
The call wrapper keeps the built-in envs' format (Hermes `<tool_call>`), so the warm start
and the context builder treat this env like the others. The valid commands can be appended
to each observation (`show_valid_actions`).

Modules: games.py (the games and their parameters), args.py (`env.args`), splits.py
(tasks: seed ranges and folds), requirements.py (what is missing, in one line), jvm.py (one
JVM per process), game.py (one game object in it), pool.py (the game objects of episodes in
play), oracle.py (gold paths, cached), text.py (prompt, tool, observations), episode.py (one
episode: rewards and metrics), env.py (the registered definition).
"""
