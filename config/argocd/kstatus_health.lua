-- Argo CD health of an agentrun.dev Session or RuntimePolicy
-- (resource.customizations.health.agentrun.dev_Session, ..._RuntimePolicy): the kstatus conditions
-- the operator writes. Stalled=True: Degraded; Reconciling=True or a status older than the spec:
-- Progressing; Ready=True: Healthy.
local hs = {}
local function condition(obj, type)
  if obj.status ~= nil and obj.status.conditions ~= nil then
    for _, c in ipairs(obj.status.conditions) do
      if c.type == type then
        return c
      end
    end
  end
  return nil
end

local generation = obj.metadata.generation or 0
local observed = -1
if obj.status ~= nil and obj.status.observedGeneration ~= nil then
  observed = obj.status.observedGeneration
end
local stalled = condition(obj, "Stalled")
local reconciling = condition(obj, "Reconciling")
local ready = condition(obj, "Ready")
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = stalled.reason .. ": " .. (stalled.message or "")
elseif observed < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. generation
elseif reconciling ~= nil and reconciling.status == "True" then
  hs.status = "Progressing"
  hs.message = reconciling.reason .. ": " .. (reconciling.message or "")
elseif ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = ready.message or ""
else
  hs.status = "Progressing"
  hs.message = "Waiting for Ready"
end
return hs
