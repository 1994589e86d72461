"""The `world` env: procedurally generated rooms, doors and keys with long optimal plans.

Modules: args.py (knobs and horizon presets), layout.py (generation), state.py (state and
action rules), planner.py (the exact oracle), explorer.py (demonstrations from what the agent
reads), tasks.py (splits), tools.py (tool schemas), env.py
(the ToolEnv, rewards, metrics, registration).
"""
