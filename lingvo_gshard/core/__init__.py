"""What a model is made of: params, the layers' base class, sharding rules and meshes, optimizers, the
experiment base class and its registry. Nothing here knows how a step is compiled or what machine it runs on."""
